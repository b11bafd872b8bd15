#pragma once
// Whether other processes want the cores, watched from the inference thread while it works.
// OpenMP's spinning wait (its default, which the server keeps) is the fastest on free cores and
// collapses when another process shares one: a step's barrier then waits for a thread that is
// not running. A server runs for long: started on free cores (the engine then keeps the spinning
// default), it samples the machine every period and runs its passes on the inference thread alone
// (no barrier to wait at) while other work shares the cores, on its whole team while they are
// free.
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

namespace retnet::server {

// Runnable tasks of other processes: the runnable count of /proc/loadavg's text less this
// process's running threads (from their /proc/self/task/*/stat texts). Exposed for tests.
int64_t runnable_of_others(const std::string& loadavg, int64_t own_running);
// Whether the text of a /proc/<pid>/task/<tid>/stat file says the thread is running (state R).
bool stat_says_running(const std::string& stat);

// The decision over the samples of others' runnable tasks, oldest first: shared once each of
// the last `to_shared` samples saw some, free again once each of the last `to_free` saw none (a
// compiler's gap between two files is not a free machine).
class SharingVerdict {
 public:
  explicit SharingVerdict(size_t to_shared = 3, size_t to_free = 5)
      : to_shared_(to_shared), to_free_(to_free) {}
  bool add(int64_t others);  // records a sample; returns whether the cores are shared now
  bool shared() const { return shared_; }

 private:
  size_t to_shared_, to_free_;
  std::deque<int64_t> recent_;
  bool shared_ = false;
};

class CoreWatch {
 public:
  explicit CoreWatch(std::chrono::milliseconds period = std::chrono::milliseconds(100))
      : period_(period) {}
  // Samples when a period has passed since the last sample; whether the cores are shared.
  bool shared();

 private:
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point last_{};
  SharingVerdict verdict_;
};

}  // namespace retnet::server
