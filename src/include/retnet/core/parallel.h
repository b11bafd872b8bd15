#pragma once
// OpenMP helpers. One thread pool serves both our loops and BLAS (OpenBLAS's OpenMP build runs
// single-threaded inside our parallel regions), so cores are never oversubscribed.
#include <cstdint>

#include "retnet/core/threads.h"

namespace retnet {

// Treats denormal floats as zero on this thread and the pool's: gradients and optimizer moments
// that decay towards zero otherwise hit the slow denormal paths of the FPU. set_num_threads calls it.
void flush_denormals_to_zero();

// Sets the OpenMP thread count of the calling thread for a scope (n <= 0: leave it), restoring it
// after: decoding a small model runs on one thread while prefill uses all of them.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int previous_ = 0;
};

// Runs fn(i) for i in [0, n) across threads, static schedule (deterministic partition).
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

// parallel_for when `parallel` (the loop is worth the threads), else a plain loop on the calling
// thread. Not an OpenMP `if` clause: a region has a cost even when `if` turns it off, more than a
// decode step's small loops take, and a step runs dozens of them
// (docs/design-notes.md#openmp-if-clauses).
template <typename Fn>
void parallel_for_if(bool parallel, int64_t n, Fn&& fn) {
  if (parallel && n > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace retnet
