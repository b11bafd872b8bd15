#include "core_watch.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

namespace retnet::server {
namespace {

std::string read_text(const char* path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

int64_t machine_busy_ticks(const std::string& proc_stat) {
  // "cpu  user nice system idle iowait irq softirq steal ..." (guest time is within user). Steal
  // is the hypervisor's, not a process on these cores.
  std::istringstream in(proc_stat);
  std::string label;
  int64_t f[8];
  if (!(in >> label) || label != "cpu") return -1;
  for (int64_t& v : f)
    if (!(in >> v)) return -1;
  return f[0] + f[1] + f[2] + f[5] + f[6];
}

int64_t own_ticks(const std::string& self_stat) {
  // "pid (name) state ppid ...": utime and stime are the 14th and 15th fields; the name may
  // hold spaces and parentheses, so count from the last ')', which ends the 2nd.
  const size_t close = self_stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(self_stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 13; ++i)
    if (!(in >> field)) return -1;
  int64_t utime = 0, stime = 0;
  if (!(in >> utime >> stime)) return -1;
  return utime + stime;
}

double others_cores(const CpuTicks& before, const CpuTicks& after, double seconds,
                    double ticks_per_second) {
  if (seconds <= 0 || before.machine_busy < 0 || after.machine_busy < 0 || before.own < 0 ||
      after.own < 0)
    return 0;  // unreadable: as if free, OpenMP's default
  const double others = static_cast<double>((after.machine_busy - before.machine_busy) -
                                            (after.own - before.own));
  return std::max(0.0, others / ticks_per_second / seconds);
}

bool SharingVerdict::add(bool busy) {
  recent_.push_back(busy);
  while (recent_.size() > std::max(to_shared_, to_free_)) recent_.pop_front();
  auto last = [&](size_t n, bool value) {
    return recent_.size() >= n && std::all_of(recent_.end() - static_cast<std::ptrdiff_t>(n),
                                              recent_.end(), [&](bool b) { return b == value; });
  };
  if (!shared_ && last(to_shared_, true)) shared_ = true;
  if (shared_ && last(to_free_, false)) shared_ = false;
  return shared_;
}

bool CoreWatch::shared() {
  const auto now = std::chrono::steady_clock::now();
  if (read_once_ && now - last_ < period_) return verdict_.shared();
  const CpuTicks ticks{machine_busy_ticks(read_text("/proc/stat")),
                       own_ticks(read_text("/proc/self/stat"))};
  const double seconds = std::chrono::duration<double>(now - last_).count();
  const double others = others_cores(ticks_, ticks, seconds, sysconf(_SC_CLK_TCK));
  const bool first = !read_once_;
  ticks_ = ticks, last_ = now, read_once_ = true;
  if (first) return verdict_.shared();  // a sample needs two readings
  return verdict_.add(others >= SharingVerdict::kBusyCores);
}

}  // namespace retnet::server
