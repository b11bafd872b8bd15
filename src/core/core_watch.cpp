#include "retnet/core/core_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

namespace retnet {
namespace {

// The first bytes of a /proc file, without allocating (decode steps sample it: they allocate
// nothing); "" when unreadable.
std::string_view read_start(const char* path, char* buffer, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = read(fd, buffer, size);
  close(fd);
  return n > 0 ? std::string_view(buffer, static_cast<size_t>(n)) : std::string_view();
}

// Reads the next whitespace-separated integer of `text` from `at`; false when there is none.
bool next_integer(std::string_view text, size_t& at, int64_t& value) {
  while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
  const auto [end, error] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (error != std::errc()) return false;
  at = static_cast<size_t>(end - text.data());
  return true;
}

}  // namespace

int64_t machine_busy_ticks(std::string_view proc_stat) {
  // "cpu  user nice system idle iowait irq softirq steal ..." (guest time is within user). Steal
  // is the hypervisor's, not a process on these cores.
  if (proc_stat.substr(0, 4) != "cpu ") return -1;
  size_t at = 4;
  int64_t f[8];
  for (int64_t& v : f)
    if (!next_integer(proc_stat, at, v)) return -1;
  return f[0] + f[1] + f[2] + f[5] + f[6];
}

int64_t own_ticks(std::string_view self_stat) {
  // "pid (name) state ppid ...": utime and stime are the 14th and 15th fields; the name may
  // hold spaces and parentheses, so count from the last ')', which ends the 2nd.
  const size_t close_paren = self_stat.rfind(')');
  if (close_paren == std::string_view::npos) return -1;
  size_t at = close_paren + 1;
  for (int field = 3; field <= 13; ++field) {  // skip to the 14th
    while (at < self_stat.size() && self_stat[at] == ' ') ++at;
    const size_t end = self_stat.find(' ', at);
    if (at >= self_stat.size() || end == std::string_view::npos) return -1;
    at = end;
  }
  int64_t utime = 0, stime = 0;
  if (!next_integer(self_stat, at, utime) || !next_integer(self_stat, at, stime)) return -1;
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
  busy_run_ = busy ? busy_run_ + 1 : 0;
  quiet_run_ = busy ? 0 : quiet_run_ + 1;
  if (!shared_ && busy_run_ >= to_shared_) shared_ = true;
  if (shared_ && quiet_run_ >= to_free_) shared_ = false;
  return shared_;
}

bool CoreWatch::shared() {
  const auto now = std::chrono::steady_clock::now();
  if (read_once_ && now - last_ < period_) return verdict_.shared();
  char machine[256], own[1024];  // /proc/stat's first line fits: its "cpu" line comes first
  const CpuTicks ticks{machine_busy_ticks(read_start("/proc/stat", machine, sizeof machine)),
                       own_ticks(read_start("/proc/self/stat", own, sizeof own))};
  const double seconds = std::chrono::duration<double>(now - last_).count();
  const double others = others_cores(ticks_, ticks, seconds, sysconf(_SC_CLK_TCK));
  const bool first = !read_once_;
  ticks_ = ticks, last_ = now, read_once_ = true;
  if (first) return verdict_.shared();  // a sample needs two readings
  return verdict_.add(others >= SharingVerdict::kBusyCores);
}

}  // namespace retnet
