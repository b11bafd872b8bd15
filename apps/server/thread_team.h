#pragma once
// The server's OpenMP threads. GNU OpenMP spins at a barrier (its default wait, which the server
// keeps) only while the threads it manages fit the cores, and each thread that starts parallel
// regions keeps a team of its own: the team of the thread that loaded the model, left beside the
// inference thread's, would make every barrier of a decode step sleep and be woken. So the server
// keeps one team, the inference thread's, set up as `retnet generate` sets up its main thread;
// and it uses the same rule on purpose to have the threads sleep while other work shares the cores.
#include <condition_variable>
#include <mutex>
#include <thread>

namespace retnet::server {

// --threads (0: every core) for the calling thread's parallel regions, and denormals flushed to
// zero on it and on its team, as the engine's commands do on their main thread.
void adopt_engine_threads(int threads);

// Ends the calling thread's team (its threads exit); the thread's next parallel region starts a
// new one. Not inside a parallel region. Only with GNU OpenMP (elsewhere teams are not per
// thread, and nothing is done).
void release_thread_team();

// Has OpenMP's threads sleep at once at their barriers, or spin first again, while the process
// runs. OpenMP reads its waiting policy once, when it loads; but GNU OpenMP spins only about a
// hundred times while the threads it manages outnumber the cores, so a team parked on a thread of
// its own, one thread per core, has every other team sleep at once, and ending it lets them spin.
// With another OpenMP runtime set() does nothing.
class SleepSwitch {
 public:
  SleepSwitch();
  ~SleepSwitch();
  SleepSwitch(const SleepSwitch&) = delete;
  SleepSwitch& operator=(const SleepSwitch&) = delete;

  void set(bool sleep);  // returns at once; the parked team comes or goes shortly after
  bool sleeping() const { return want_; }

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable changed_;
  bool want_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace retnet::server
