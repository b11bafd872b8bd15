// The server's main loop: loads the model, starts the inference thread and the HTTP server, and
// shuts them down in order on SIGINT or SIGTERM.
#include "serve_main.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "guarded_server.h"
#include "http_api.h"
#include "retnet/core/read_file.h"
#include "retnet/infer/draft_model.h"
#include "retnet/retnet.h"
#include "scheduler.h"

namespace retnet::server {
namespace {

std::vector<std::string> keys_from_file(const std::string& path) {
  std::vector<std::string> keys;
  const std::string text = read_file(path, "API key file");
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') keys.push_back(line);
    start = end + 1;
  }
  RETNET_CHECK(!keys.empty(), "API key file '{}' holds no key (one per line)", path);
  return keys;
}

// The one thread that receives SIGINT and SIGTERM, started before anything that can block
// (opening a model file that is a FIFO, loading): until the server is up, a signal ends the
// process at once; from then on it runs the orderly stop the server registered.
class SignalThread {
 public:
  explicit SignalThread(const sigset_t& signals) : signals_(signals) {
    thread_ = std::thread([this] { run(); });
  }
  ~SignalThread() { finish(); }
  // `stop` runs on the signal thread when a signal comes; an empty one goes back to exiting.
  void on_signal(std::function<void()> stop) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = std::move(stop);
  }
  bool by_signal() const { return by_signal_; }
  // Joins the thread; wakes it first unless a signal already did.
  void finish() {
    if (!thread_.joinable()) return;
    if (!by_signal_) pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }

 private:
  void run() {
    int sig = 0;
    sigwait(&signals_, &sig);
    if (sig == SIGUSR1) return;
    by_signal_ = true;
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stop_) {
      std::fprintf(stderr, "retnet serve: %s received while starting: stopping\n", name);
      std::fflush(stderr);
      _exit(128 + sig);  // nothing to clean up yet, and the main thread may be blocked in open()
    }
    std::fprintf(stderr, "retnet serve: %s received: stopping\n", name);
    stop_();
  }
  sigset_t signals_;
  std::mutex mutex_;
  std::function<void()> stop_;
  std::atomic<bool> by_signal_{false};
  std::thread thread_;
};

}  // namespace

void run_server(ServeOptions o) {
  // Signals go to one thread that shuts the server down in order; every other thread (HTTP,
  // inference, OpenMP) inherits the blocked mask. A client that goes away must not kill us.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // internal: ends the signal thread when listen() fails
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  SignalThread signal_thread(signals);

  if (!o.api_key_file.empty()) {
    auto more = keys_from_file(o.api_key_file);
    o.api_keys.insert(o.api_keys.end(), more.begin(), more.end());
  }
  for (const auto& k : o.api_keys) RETNET_CHECK(!k.empty(), "--api-key must not be empty");
  if (!o.slot_save_dir.empty())
    RETNET_CHECK(std::filesystem::is_directory(o.slot_save_dir),
                 "--slot-save-dir '{}' is not a directory", o.slot_save_dir);
  set_num_threads(o.threads);
  // Before the model: a template that does not parse stops the server at once.
  const ChatFormatter chat(load_chat_template(o.model, o.chat_template_file));
  const auto t0 = std::chrono::steady_clock::now();
  // One pass from the file into the weights of the chosen dtype (no whole float32 copy first);
  // a directory's tensors already in that type are used where they lie, as `retnet generate`
  // uses them.
  Model model = load_model_for_inference(
      o.model,
      o.config.empty() ? std::nullopt : std::optional<Config>(Config::from_file(o.config)),
      parse_decode_precision(o.dtype, "--dtype"));
  model.use_backend(o.backend);
  std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(o.model);
  RETNET_CHECK(tokenizer->vocab_size() <= model.config().vocab_size,
               "the tokenizer has {} tokens but the model's vocabulary only {}",
               tokenizer->vocab_size(), model.config().vocab_size);
  const std::string model_id =
      o.alias.empty() ? std::filesystem::path(o.model).filename().string() : o.alias;
  // The draft model of speculative decoding: the model's vocabulary and tokenizer, its dtype.
  std::optional<Model> draft;
  if (!o.draft_model.empty()) {
    RETNET_CHECK(o.lookup == 0, "give --lookup or --draft-model, not both");
    draft.emplace(load_draft_model(o.draft_model, parse_decode_precision(o.dtype, "--dtype"),
                                   /*in_place=*/true, model, *tokenizer, o.model));
    draft->use_backend(o.backend);
  }

  Metrics metrics;
  SchedulerOptions so;
  so.slots = o.parallel;
  so.max_queue = o.max_queue;
  so.prefill_block = o.prefill_block;
  so.prefill_batch = o.prefill_batch;
  so.cache_bytes = o.state_cache_mib * (int64_t{1} << 20);
  so.cache_dir = o.cache_dir;
  so.cache_dir_bytes = o.cache_dir_mib * (int64_t{1} << 20);
  so.cache_bf16 = o.cache_type == "bf16";
  so.threads = std::max(o.threads, 0);
  so.speculate_max_streams = o.lookup_max_streams;
  so.draft_model = draft ? &*draft : nullptr;
  Scheduler scheduler(model, *tokenizer, so, metrics);
  HttpApi api(o, model_id, model, *tokenizer, chat, scheduler, metrics);

  // Every admitted request holds a connection (and its thread) while it streams: --parallel +
  // --max-queue of them at most; --max-connections caps them all.
  GuardedServer http(
      ConnectionLimits{o.read_timeout_s, o.max_connections, o.max_connections_per_client});
  http.set_payload_max_length(static_cast<size_t>(o.max_body_mib) << 20);
  http.set_keep_alive_timeout(2);
  // A client that stops reading for a while (a browser busy drawing a fast stream, a slow link)
  // keeps its stream: a blocked write waits up to the request's --timeout, not cpp-httplib's
  // default of 5 s, after which the stream was cut. A client that goes away is still noticed at
  // once (the write fails).
  http.set_write_timeout(static_cast<time_t>(std::max(1.0, o.timeout_s)), 0);
  // SSE sends many small writes: without TCP_NODELAY, Nagle's algorithm holds each one back until
  // the client acknowledges the previous (up to its delayed-ACK timer, 40 ms on Linux).
  http.set_tcp_nodelay(true);
  api.install(http);
  int listen_socket = -1;
  // SO_REUSEADDR rebinds a port a stopped server left in TIME_WAIT, but refuses one another server
  // listens on; cpp-httplib's own SO_REUSEPORT would let a second server share it silently (each
  // getting some of the connections), so that only comes with --reuse-port.
  http.set_socket_options([&listen_socket, reuse_port = o.reuse_port](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (reuse_port) setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
    listen_socket = sock;
  });
  RETNET_CHECK(http.bind_to_port(o.host, o.port),
               "cannot listen on {}:{}: the port is in use (another server?) or the host is not "
               "an address of this machine",
               o.host, o.port);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients would overflow it and wait
  // for SYN retransmissions (a second or more). Listening again raises the backlog.
  if (listen_socket >= 0) ::listen(listen_socket, SOMAXCONN);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "retnet serve: model '%s' (%lld parameters, %s state per stream) loaded in %.2f s; "
               "%lld slots; weights %s; chat template: %s; listening on http://%s:%d\n",
               model_id.c_str(), static_cast<long long>(model.parameter_count()),
               fmt::format("{:.2f} KiB", model.state_bytes_per_sequence() / 1024.0).c_str(), load_s,
               static_cast<long long>(o.parallel), o.dtype.c_str(), chat.origin().c_str(),
               o.host.c_str(), o.port);
  std::fflush(stderr);

  if (o.api_keys.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    std::fprintf(stderr,
                 "retnet serve: warning: listening on %s without --api-key: anyone who "
                 "can reach this address can use the server\n",
                 o.host.c_str());
  // Cleared before `api`, `scheduler` and `http` go away, whichever way this function ends.
  struct ClearOnExit {
    SignalThread& thread;
    ~ClearOnExit() { thread.on_signal(nullptr); }
  } clear_on_exit{signal_thread};
  signal_thread.on_signal([&] {
    api.stop_accepting();                               // new requests get 503
    scheduler.shutdown("the server is shutting down");  // running streams end with an error
    // Let the streams write their error chunk: httplib stops writing them once stop() is called.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (api.open_streams() > 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();  // no new connections; listen() returns once the handlers have finished
  });
  const bool listened = http.listen_after_bind();
  signal_thread.finish();
  const bool by_signal = signal_thread.by_signal();
  scheduler.shutdown("the server is shutting down");
  RETNET_CHECK(listened || by_signal, "the server stopped listening on {}:{} unexpectedly", o.host,
               o.port);
  std::fprintf(stderr, "retnet serve: stopped\n");
}

}  // namespace retnet::server
