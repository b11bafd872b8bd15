#include "core_watch.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

namespace retnet::server {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int64_t own_running_threads() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  int64_t running = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    running += stat_says_running(read_text(std::string("/proc/self/task/") + entry->d_name + "/stat"));
  }
  closedir(dir);
  return running;
}

}  // namespace

int64_t runnable_of_others(const std::string& loadavg, int64_t own_running) {
  std::istringstream in(loadavg);
  double averages[3];
  int64_t runnable = 0;
  char slash = 0;
  if (!(in >> averages[0] >> averages[1] >> averages[2] >> runnable >> slash) || slash != '/')
    return 0;  // unreadable: as if free, OpenMP's default
  return std::max<int64_t>(0, runnable - own_running);
}

bool stat_says_running(const std::string& stat) {
  // "tid (name) S ...": the name may hold spaces and parentheses, so the state follows the last ')'.
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R';
}

bool SharingVerdict::add(int64_t others) {
  recent_.push_back(others);
  while (recent_.size() > std::max(to_shared_, to_free_)) recent_.pop_front();
  auto last = [&](size_t n, auto pred) {
    return recent_.size() >= n && std::all_of(recent_.end() - static_cast<std::ptrdiff_t>(n),
                                              recent_.end(), pred);
  };
  if (!shared_ && last(to_shared_, [](int64_t o) { return o > 0; })) shared_ = true;
  if (shared_ && last(to_free_, [](int64_t o) { return o == 0; })) shared_ = false;
  return shared_;
}

bool CoreWatch::shared() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < period_) return verdict_.shared();
  last_ = now;
  // Own threads first: the inference thread reading this is one of them, and so is a team
  // thread still spinning after the last pass.
  const int64_t own = own_running_threads();
  return verdict_.add(runnable_of_others(read_text("/proc/loadavg"), own));
}

}  // namespace retnet::server
