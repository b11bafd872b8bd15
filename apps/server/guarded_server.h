#pragma once
// An httplib::Server that survives slow and greedy clients. cpp-httplib's read timeout applies to
// each recv, so a client that sends one byte a second never times out and holds a thread for as
// long as it likes. This server:
// - gives every request a deadline to be read whole (headers and body), on every request of a
//   keep-alive connection; a read past it fails and the connection is closed;
// - runs each connection on a thread started on demand up to --max-connections, and answers a
//   connection past that cap 503 (and past --max-connections-per-client from one address, 429)
//   at once, on a few threads kept for these answers, instead of queueing it behind slow clients.
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace retnet::server {

struct ConnectionLimits {
  double read_timeout_s = 15;
  int64_t max_connections = 256;
  int64_t max_connections_per_client = 64;
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(const ConnectionLimits& limits);

  // Routes as httplib's, with a handler that first marks the request read: its body has been
  // read, so the read deadline no longer applies (the response takes as long as it needs). The
  // next request's deadline starts when its first byte arrives.
  GuardedServer& Get(const std::string& pattern, Handler handler);
  GuardedServer& Post(const std::string& pattern, Handler handler);
  // True when this thread's request was not read whole within --read-timeout.
  static bool request_timed_out();
  // The socket of the connection this thread serves, or -1 outside a connection.
  static int current_socket();
  // When this thread's request began to arrive (its first byte).
  static std::chrono::steady_clock::time_point request_started();
  // Connections open now (being served).
  int64_t open_connections() const;

 private:
  // Replaces cpp-httplib's (private, virtual) loop over a connection's keep-alive requests.
  bool process_and_close_socket(socket_t sock) override;
  // Counts the connection in, or answers 503/429 and closes it (false).
  bool admit(socket_t sock, const std::string& client);
  static Handler marking_request_read(Handler handler);

  ConnectionLimits limits_;
  mutable std::mutex mutex_;
  int64_t open_ = 0;
  std::map<std::string, int64_t> per_client_;
};

}  // namespace retnet::server
