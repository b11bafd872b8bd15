// `retnet serve`: an OpenAI-compatible HTTP server over one model, with continuous batching on
// one inference thread (scheduler.h), a prompt cache of recurrent states, metrics and limits.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "http_api.h"
#include "scheduler.h"
#include "serve_options.h"

namespace retnet::cli {
namespace {

using server::ServeOptions;

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

void run_serve(ServeOptions o) {
  // Signals go to one thread that shuts the server down in order; every other thread (HTTP,
  // inference, OpenMP) inherits the blocked mask. A client that goes away must not kill us.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (!o.api_key_file.empty()) {
    auto more = keys_from_file(o.api_key_file);
    o.api_keys.insert(o.api_keys.end(), more.begin(), more.end());
  }
  for (const auto& k : o.api_keys) RETNET_CHECK(!k.empty(), "--api-key must not be empty");
  if (!o.slot_save_dir.empty())
    RETNET_CHECK(std::filesystem::is_directory(o.slot_save_dir),
                 "--slot-save-dir '{}' is not a directory", o.slot_save_dir);
  apply_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  Model model = load_model(o.model, optional_config(o.config));
  model.prepare_decode(DecodePrecision::F32);
  std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(o.model);
  RETNET_CHECK(tokenizer->vocab_size() <= model.config().vocab_size,
               "the tokenizer has {} tokens but the model's vocabulary only {}",
               tokenizer->vocab_size(), model.config().vocab_size);
  const std::string model_id =
      o.alias.empty() ? std::filesystem::path(o.model).filename().string() : o.alias;

  server::Metrics metrics;
  server::SchedulerOptions so;
  so.slots = o.parallel;
  so.max_queue = o.max_queue;
  so.prefill_block = o.prefill_block;
  so.cache_bytes = o.state_cache_mib * (int64_t{1} << 20);
  so.threads = std::max(o.threads, 0);
  server::Scheduler scheduler(model, *tokenizer, so, metrics);
  server::HttpApi api(o, model_id, model, *tokenizer, scheduler, metrics);

  httplib::Server http;
  // Every admitted request holds a thread while it streams: enough for all slots and the queue.
  const size_t http_threads = static_cast<size_t>(o.parallel + o.max_queue + 8);
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  http.set_payload_max_length(static_cast<size_t>(o.max_body_mib) << 20);
  http.set_keep_alive_timeout(2);
  api.install(http);
  RETNET_CHECK(http.bind_to_port(o.host, o.port), "cannot listen on {}:{} (in use, or a bad host?)",
               o.host, o.port);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "retnet serve: model '%s' (%lld parameters, %s state per stream) loaded in %.2f s; "
               "%lld slots; listening on http://%s:%d\n",
               model_id.c_str(), static_cast<long long>(model.parameter_count()),
               human_bytes(static_cast<double>(model.state_bytes_per_sequence())).c_str(), load_s,
               static_cast<long long>(o.parallel), o.host.c_str(), o.port);
  std::fflush(stderr);

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "retnet serve: %s received: stopping\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    api.stop_accepting();  // new requests get 503
    scheduler.shutdown("the server is shutting down");  // running streams end with an error
    // Let the streams write their error chunk: httplib stops writing them once stop() is called.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (api.open_streams() > 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();  // no new connections; listen() returns once the handlers have finished
  });
  const bool listened = http.listen_after_bind();
  if (signal_thread.joinable()) {
    // listen() ended without a signal (it failed): wake the signal thread so it can be joined.
    if (!listened) kill(getpid(), SIGTERM);
    signal_thread.join();
  }
  std::fprintf(stderr, "retnet serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over HTTP with OpenAI's API: continuous batching, a prompt cache of "
               "recurrent states, metrics");
  add_model_options(cmd, o->model, o->config);
  cmd->add_option("--alias", o->alias, "Model id clients name (default: the model's file name)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  add_checked(cmd, "--port", o->port, "Port to listen on", integer_within(1, 65535));
  add_checked(cmd, "--parallel", o->parallel, "Slots: streams decoded together",
              integer_within(1, 4096));
  add_threads_option(cmd, o->threads, "Threads (default: all cores; small models decode on one)");
  cmd->add_option("--api-key", o->api_keys,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health "
                  "(repeatable)");
  cmd->add_option("--api-key-file", o->api_key_file, "Read API keys from a file, one per line");
  add_checked(cmd, "--max-prompt-tokens", o->max_prompt_tokens, "Refuse longer prompts",
              integer_at_least(1));
  add_checked(cmd, "--max-tokens,-n", o->max_tokens,
              "Most tokens a request may generate (and the default)", integer_at_least(0));
  add_checked(cmd, "--max-queue", o->max_queue, "Requests waiting for a slot before 429",
              integer_at_least(0));
  add_checked(cmd, "--timeout", o->timeout_s, "Seconds a request may take, queue included",
              number_above(0));
  add_checked(cmd, "--state-cache-mib", o->state_cache_mib,
              "Prompt cache of sequence states, MiB (0: off)", integer_at_least(0));
  add_checked(cmd, "--max-body-mib", o->max_body_mib, "Largest request body, MiB",
              integer_within(1, 1024));
  add_checked(cmd, "--prefill-block", o->prefill_block,
              "Prompt tokens read between two decode steps (rounded to whole chunks)",
              integer_at_least(1));
  cmd->add_option("--slot-save-dir", o->slot_save_dir,
                  "Enable POST /slots/{id}?action=save|restore with files in this directory");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace retnet::cli
