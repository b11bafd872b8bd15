#include "thread_team.h"

#include <dlfcn.h>
#include <omp.h>

#include "retnet/core/threads.h"

namespace retnet::server {
namespace {

// LLVM's OpenMP (the sanitizer build) exports __kmpc_fork_call; GNU's does not.
bool gnu_openmp() {
  static const bool gnu = dlsym(RTLD_DEFAULT, "__kmpc_fork_call") == nullptr;
  return gnu;
}

}  // namespace

void adopt_engine_threads(int threads) { set_num_threads(threads); }

void release_thread_team() {
  if (gnu_openmp()) omp_pause_resource_all(omp_pause_soft);
}

SleepSwitch::SleepSwitch() {
  if (gnu_openmp()) thread_ = std::thread([this] { run(); });
}

SleepSwitch::~SleepSwitch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();  // its team ends with it
}

void SleepSwitch::set(bool sleep) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (want_ == sleep) return;
    want_ = sleep;
  }
  changed_.notify_all();
}

void SleepSwitch::run() {
  bool parked = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (want_ && !parked) {
      // One thread per core: with any team of two or more beside it, the threads outnumber them.
#pragma omp parallel num_threads(omp_get_num_procs())
      {
      }
      parked = true;
    } else if (!want_ && parked) {
      release_thread_team();
      parked = false;
    }
    changed_.wait(lock, [&] { return stop_ || want_ != parked; });
  }
}

}  // namespace retnet::server
