#pragma once
// Whether other processes want the cores, watched by the thread that runs the passes while it
// works. OpenMP's spinning wait (its default, which the engine keeps on free cores) is the fastest
// on free cores and collapses when another process shares one: a pass's barrier then waits for a
// thread that is not running. A long run started on free cores (a server, a long generation)
// samples the machine every period and runs its passes on the calling thread alone (no barrier to
// wait at) while other work shares the cores, on every thread while they are free.
//
// A sample is the CPU time other processes took over the period: the machine's busy time
// (/proc/stat) less this process's (/proc/self/stat). Not /proc/loadavg's runnable count: on
// virtual machines it counts tasks that never run on these cores (seen: one or two on an idle
// 2-core VM most of the time), which called free cores shared.
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <string_view>

namespace retnet {

// Clock ticks (USER_HZ) of CPU time: every core's busy time, and this process's own.
struct CpuTicks {
  int64_t machine_busy = 0, own = 0;
};
// The busy ticks of /proc/stat's text (its "cpu" line: user, nice, system, irq, softirq), and
// this process's ticks from its /proc/self/stat text (utime + stime); -1 when unreadable.
int64_t machine_busy_ticks(std::string_view proc_stat);
int64_t own_ticks(std::string_view self_stat);
// Cores' worth of CPU time others took between two readings `seconds` apart (never below 0).
double others_cores(const CpuTicks& before, const CpuTicks& after, double seconds,
                    double ticks_per_second);

// The decision over the samples (busy: others took at least kBusyCores), oldest first: shared
// once each of the last `to_shared` samples was busy, free again once each of the last `to_free`
// was quiet (a compiler's gap between two files is not a free machine).
class SharingVerdict {
 public:
  static constexpr double kBusyCores = 0.3;
  explicit SharingVerdict(size_t to_shared = 3, size_t to_free = 5)
      : to_shared_(to_shared), to_free_(to_free) {}
  bool add(bool busy);  // records a sample; returns whether the cores are shared now
  bool shared() const { return shared_; }

 private:
  size_t to_shared_, to_free_;
  size_t busy_run_ = 0, quiet_run_ = 0;  // the latest samples' run of busy or quiet ones
  bool shared_ = false;
};

class CoreWatch {
 public:
  // /proc/stat counts in ticks of 10 ms: a period of 100 ms reads others' time to a tenth of a
  // core.
  explicit CoreWatch(std::chrono::milliseconds period = std::chrono::milliseconds(100))
      : period_(period) {}
  // Samples when a period has passed since the last sample; whether the cores are shared.
  bool shared();

 private:
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point last_{};
  CpuTicks ticks_;
  bool read_once_ = false;
  SharingVerdict verdict_;
};

}  // namespace retnet
