#include "serve_client.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "retnet/core/error.h"

extern char** environ;

namespace retnet::cli {
namespace {

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  RETNET_CHECK(fd >= 0, "cannot open a socket to find a free port");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  RETNET_CHECK(ok, "cannot bind a loopback socket to find a free port");
  return ntohs(address.sin_port);
}

int wait_status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A response's usage object into r: completion, prompt and cached prompt tokens.
void read_usage(const nlohmann::json& usage, RequestResult& r) {
  r.generated = usage["completion_tokens"].get<int64_t>();
  r.prompt_tokens = usage.value("prompt_tokens", int64_t{0});
  if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
    r.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
}

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& serve_args) {
  port_ = free_loopback_port();
  log_path_ =
      (std::filesystem::temp_directory_path() /
       ("retnet-bench-serve-" + std::to_string(getpid()) + "-" + std::to_string(port_) + ".log"))
          .string();
  std::vector<std::string> args = {"/proc/self/exe", "serve",  "--host",
                                   "127.0.0.1",      "--port", std::to_string(port_)};
  args.insert(args.end(), serve_args.begin(), serve_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // posix_spawn, not fork: OpenMP and BLAS threads are not fork-safe.
  const int rc = posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  RETNET_CHECK(rc == 0, "cannot start `retnet serve` (posix_spawn: {})", rc);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    RETNET_CHECK(alive(), "`retnet serve` exited at start: {}", log());
    if (http_get(port_, "/health").first == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop();
  throw Error(fmt::format("`retnet serve` did not answer /health within 120 s: {}", log()));
}

ServerProcess::~ServerProcess() {
  stop();
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

bool ServerProcess::alive() const {
  if (exit_status_ >= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == 0) return true;
  exit_status_ = wait_status_code(status);  // it exited: keep how
  return false;
}

int64_t ServerProcess::rss_bytes() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

int ServerProcess::stop() {
  if (exit_status_ >= 0 || pid_ <= 0) return exit_status_;
  if (!alive()) return exit_status_;
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  exit_status_ = wait_status_code(status);
  return exit_status_;
}

std::string ServerProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::pair<int, std::string> http_get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_read_timeout(60);
  auto res = client.Get(path.c_str());
  if (!res) return {0, ""};
  return {res->status, res->body};
}

RequestResult run_completion(int port, const RequestOptions& o) {
  RequestResult r;
  nlohmann::json body = {{"prompt", o.prompt}, {"max_tokens", o.max_tokens}, {"temperature", 0.8},
                         {"seed", o.seed},     {"ignore_eos", true},         {"stream", o.stream}};
  if (o.stream) body["stream_options"] = {{"include_usage", true}};
  if (o.extra_fields.is_object()) body.update(o.extra_fields);
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_tcp_nodelay(true);  // the request's header and body go out at once
  if (o.read_timeout_ms > 0)
    client.set_read_timeout(o.read_timeout_ms / 1000, (o.read_timeout_ms % 1000) * 1000);
  else
    client.set_read_timeout(300);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  std::string buffer, whole;
  bool done = false, parse_error = false;
  int64_t chunks = 0;
  // SSE events arrive in pieces; each complete `data:` line is one event.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (!o.stream) {
      whole.append(data, n);
      return true;
    }
    buffer.append(data, n);
    size_t cut;
    while ((cut = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, cut);
      buffer.erase(0, cut + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      try {
        const auto j = nlohmann::json::parse(event.substr(6));
        if (j.contains("error")) parse_error = true;
        if (j.contains("usage") && j["usage"].is_object()) read_usage(j["usage"], r);
        if (j.contains("choices") && !j["choices"].empty() &&
            !j["choices"][0]["text"].get<std::string>().empty()) {
          r.arrivals.push_back(Clock::now());
          r.text += j["choices"][0]["text"].get<std::string>();
          if (o.disconnect_after_chunks >= 0 && ++chunks >= o.disconnect_after_chunks) {
            r.left = true;
            return false;  // httplib closes the connection
          }
        }
      } catch (const std::exception&) {
        parse_error = true;
      }
    }
    return true;
  };
  r.start = Clock::now();
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  r.end = Clock::now();
  r.status = sent ? res.status : 0;
  if (r.left) return r;
  if (!sent) {
    if (error == httplib::Error::Read && o.read_timeout_ms > 0) {
      r.left = true;  // the read timeout we asked for
    } else {
      r.error = fmt::format("{} request: no complete response after {:.1f} s ({}; {} text chunks)",
                            o.stream ? "streamed" : "non-streamed", since(r.start),
                            httplib::to_string(error), r.arrivals.size());
    }
    return r;
  }
  if (res.status != 200) {
    r.error = fmt::format("HTTP {}: {}", res.status, o.stream ? buffer : whole);
    return r;
  }
  if (o.stream) {
    r.ok = done && !parse_error;
    if (!r.ok) r.error = parse_error ? "an error event or bad JSON in the stream" : "no [DONE]";
  } else {
    try {
      const auto j = nlohmann::json::parse(whole);
      read_usage(j["usage"], r);
      r.text = j["choices"][0]["text"].get<std::string>();
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = std::string("bad JSON response: ") + e.what();
    }
  }
  return r;
}

}  // namespace retnet::cli
