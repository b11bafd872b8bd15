#include "retnet/core/process_memory.h"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace retnet {
namespace {

// A "Field:  N kB" line of a /proc file in bytes (0 if absent).
int64_t proc_field_bytes(const char* path, const char* field) {
  std::ifstream in(path);
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return 1024 * std::atoll(line.c_str() + key.size());
  return 0;
}

int64_t status_bytes(const char* field) { return proc_field_bytes("/proc/self/status", field); }

}  // namespace

// VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across execve (a process spawned by a
// large parent starts with the parent's peak), while VmHWM belongs to the process's own memory.
int64_t peak_rss_bytes() {
  if (const int64_t hwm = status_bytes("VmHWM"); hwm > 0) return hwm;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return 1024 * static_cast<int64_t>(ru.ru_maxrss);
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

int64_t current_rss_bytes() { return status_bytes("VmRSS"); }

int64_t meminfo_bytes(const char* field) { return proc_field_bytes("/proc/meminfo", field); }

}  // namespace retnet
