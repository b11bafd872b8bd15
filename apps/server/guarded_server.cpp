#include "guarded_server.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "openai_request.h"
#include "openai_response.h"

namespace retnet::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Starts a thread only when no idle one is waiting, up to `cap`; the threads stay for reuse.
// Connections past the cap wait in the queue (the server answers those past --max-connections
// at once, so the queue stays short).
class OnDemandThreadPool : public httplib::TaskQueue {
 public:
  explicit OnDemandThreadPool(size_t cap) : cap_(cap) {}
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < cap_) threads_.emplace_back([this] { work(); });
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  const size_t cap_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

// Threads kept beyond --max-connections to answer 503/429, which takes them a moment each.
constexpr size_t kRefusalThreads = 8;

bool numeric_host_and_port(const sockaddr_storage& address, socklen_t length, std::string& host,
                           int& port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

// A connection's socket as cpp-httplib's Stream, with a read buffer (headers are read a byte at
// a time) and the request's read deadline: while a request is being read, each read waits at
// most until the deadline and fails after it.
class DeadlineSocketStream : public httplib::Stream {
 public:
  DeadlineSocketStream(socket_t sock, std::chrono::milliseconds per_read,
                       std::chrono::milliseconds per_write)
      : sock_(sock), per_read_(per_read), per_write_(per_write) {}

  void start_request(SteadyClock::time_point deadline) {
    reading_ = true;
    answered_ = false;
    deadline_ = deadline;
  }
  void request_read() { reading_ = false; }
  // A read was refused for the deadline: the connection is to be closed.
  bool missed_deadline() const { return missed_deadline_; }
  // Whether anything of a response to the current request was written.
  bool answered() const { return answered_; }

  bool is_readable() const override {
    return !past_deadline() && (begin_ < end_ || wait_for(POLLIN, read_wait()));
  }
  // Like httplib's: writable and the client has not closed, so that a stream notices at its next
  // write that its client left.
  bool is_writable() const override {
    if (!wait_for(POLLOUT, per_write_)) return false;
    char byte;
    return !(wait_for(POLLIN, std::chrono::milliseconds(0)) &&
             ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0);
  }
  ssize_t read(char* ptr, size_t size) override {
    if (past_deadline()) return -1;  // even with bytes waiting: a trickle gets no more time
    if (begin_ == end_) {
      if (!wait_for(POLLIN, read_wait())) {
        past_deadline();  // note whether the deadline, not the per-read timeout, ran out
        return -1;
      }
      const ssize_t n = ::recv(sock_, buffer_, sizeof(buffer_), 0);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::copy(buffer_ + begin_, buffer_ + begin_ + n, ptr);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    answered_ = true;
    return ::send(sock_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t length = sizeof(a);
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &length) == 0)
      numeric_host_and_port(a, length, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t length = sizeof(a);
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &length) == 0)
      numeric_host_and_port(a, length, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  bool past_deadline() const {
    if (reading_ && SteadyClock::now() >= deadline_) missed_deadline_ = true;
    return missed_deadline_;
  }
  // While a request is read, the deadline alone bounds a wait: capping it with httplib's
  // per-read timeout too (5 s) would drop a client that pauses within --read-timeout, silently.
  std::chrono::milliseconds read_wait() const {
    if (!reading_) return per_read_;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - SteadyClock::now());
    return std::max(std::chrono::milliseconds(0), left);
  }
  bool wait_for(short events, std::chrono::milliseconds wait) const {
    pollfd p{sock_, events, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(wait.count()));
    } while (r < 0 && errno == EINTR);
    return r > 0;
  }

  socket_t sock_;
  std::chrono::milliseconds per_read_, per_write_;
  bool reading_ = false;
  mutable bool missed_deadline_ = false;
  bool answered_ = false;
  SteadyClock::time_point deadline_;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
};

thread_local DeadlineSocketStream* tl_stream = nullptr;
thread_local SteadyClock::time_point tl_request_started;

std::string peer_address(int sock) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  std::string host;
  int port = 0;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&peer), &length) != 0 ||
      !numeric_host_and_port(peer, length, host, port))
    return "";
  return host;
}

// A whole HTTP response written straight to the socket, then the connection closed: the client
// is refused before any of its request is read.
void refuse(int sock, int status, const char* reason, const std::string& message,
            const std::string& type, const std::string& code = "too_many_connections") {
  const std::string body = json_text(error_json(message, type, code));
  const std::string response = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n{}\r\n{}",
      status, reason, body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
  timeval one_second{1, 0};
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof(one_second));
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = ::send(sock, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(sock, SHUT_WR);
}

// Waits up to `seconds` for the next request's first byte; false if none comes, the client
// closed, or the server stops.
bool next_request_arrives(socket_t sock, time_t seconds, const httplib::Server& server) {
  const auto give_up = SteadyClock::now() + std::chrono::seconds(seconds);
  while (server.is_running() && SteadyClock::now() < give_up) {
    pollfd p{sock, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
  return false;
}

std::chrono::milliseconds to_ms(time_t sec, time_t usec) {
  return std::chrono::milliseconds(sec * 1000 + usec / 1000);
}

}  // namespace

GuardedServer::GuardedServer(const ConnectionLimits& limits) : limits_(limits) {
  const size_t threads = static_cast<size_t>(limits_.max_connections) + kRefusalThreads;
  new_task_queue = [threads] { return new OnDemandThreadPool(threads); };
}

int64_t GuardedServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_;
}

bool GuardedServer::admit(socket_t sock, const std::string& client) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (open_ >= limits_.max_connections) {
    lock.unlock();
    refuse(sock, 503, "Service Unavailable",
           fmt::format("the server has {} open connections (--max-connections); retry later",
                       limits_.max_connections),
           "server_error");
    return false;
  }
  int64_t& mine = per_client_[client];
  if (mine >= limits_.max_connections_per_client) {
    lock.unlock();
    refuse(sock, 429, "Too Many Requests",
           fmt::format("this client has {} open connections (--max-connections-per-client); "
                       "close some or retry later",
                       limits_.max_connections_per_client),
           "rate_limit_exceeded");
    return false;
  }
  mine += 1;
  open_ += 1;
  return true;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const std::string client = peer_address(sock);
  bool ok = false;
  if (admit(sock, client)) {
    DeadlineSocketStream stream(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                                to_ms(write_timeout_sec_, write_timeout_usec_));
    tl_stream = &stream;
    const auto read_timeout = std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(limits_.read_timeout_s));
    // The first request may take the keep-alive wait to start, like the next ones.
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      if (!next_request_arrives(sock, keep_alive_timeout_sec_, *this)) break;
      tl_request_started = SteadyClock::now();
      stream.start_request(tl_request_started + read_timeout);
      bool connection_closed = false;
      ok = process_request(stream, left == 1, connection_closed, nullptr);
      if (stream.missed_deadline()) {
        // Cut in its request line, which httplib answers with nothing.
        if (!stream.answered())
          refuse(sock, 408, "Request Timeout",
                 fmt::format("the request was not read whole within {} s (--read-timeout)",
                             limits_.read_timeout_s),
                 "invalid_request_error", "request_timeout");
        break;
      }
      if (!ok || connection_closed) break;
    }
    tl_stream = nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    open_ -= 1;
    if (--per_client_[client] == 0) per_client_.erase(client);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

GuardedServer::Handler GuardedServer::marking_request_read(Handler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    if (tl_stream) tl_stream->request_read();
    handler(req, res);
  };
}

GuardedServer& GuardedServer::Get(const std::string& pattern, Handler handler) {
  httplib::Server::Get(pattern, marking_request_read(std::move(handler)));
  return *this;
}

GuardedServer& GuardedServer::Post(const std::string& pattern, Handler handler) {
  httplib::Server::Post(pattern, marking_request_read(std::move(handler)));
  return *this;
}

bool GuardedServer::request_timed_out() { return tl_stream && tl_stream->missed_deadline(); }

int GuardedServer::current_socket() { return tl_stream ? tl_stream->socket() : -1; }

std::chrono::steady_clock::time_point GuardedServer::request_started() {
  return tl_request_started;
}

}  // namespace retnet::server
