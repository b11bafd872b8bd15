#pragma once
// What `retnet bench serve` needs to drive a server over loopback: a `retnet serve` child process
// on a free port, and one completion request timed token by token.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"

namespace retnet::cli {

// `retnet serve` (this binary again) on a free 127.0.0.1 port, its log in a temporary file;
// stopped with SIGTERM (then SIGKILL after 30 s) by stop() or the destructor.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& serve_args);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool alive() const;
  int64_t rss_bytes() const;  // the server's resident memory now (0 once it has exited)
  // SIGTERM, then waits; returns the exit status (128 + signal if one killed it).
  int stop();
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  mutable int exit_status_ = -1;  // set once the child is reaped
  std::string log_path_;
};

struct RequestOptions {
  bool stream = true;
  int64_t max_tokens = 128;
  uint64_t seed = 0;
  std::string prompt;
  // Leave after this many text chunks of a stream (< 0: read to the end).
  int64_t disconnect_after_chunks = -1;
  // Give up on the response after this long (<= 0: 300 s): a non-streamed client that leaves.
  int64_t read_timeout_ms = 0;
  // Fields added to the request's body (an object, e.g. {"response_format": ...}; null: none).
  nlohmann::json extra_fields;
};

struct RequestResult {
  bool ok = false;    // 200, and a complete answer ([DONE] for a stream)
  bool left = false;  // the client left on purpose (disconnect or read timeout)
  int status = 0;     // HTTP status (0: none)
  std::string error;  // what went wrong when !ok && !left
  Clock::time_point start;
  std::vector<Clock::time_point> arrivals;  // text chunks of a stream
  int64_t generated = 0;                    // completion tokens (from usage)
  int64_t prompt_tokens = 0, cached_tokens = 0;  // from usage (cached: prompt_tokens_details)
  std::string text;                              // the completion's text
  Clock::time_point end;
};

// One /v1/completions request (ignore_eos, temperature 0.8, the given seed) against port.
RequestResult run_completion(int port, const RequestOptions& options);

// GET `path` on port: {status, body} ({0, ""} when nothing answers).
std::pair<int, std::string> http_get(int port, const std::string& path);

}  // namespace retnet::cli
