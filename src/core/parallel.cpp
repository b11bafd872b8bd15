#include "retnet/core/parallel.h"

#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "retnet/core/gemm.h"

namespace retnet {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  blas_set_num_threads(n);
  flush_denormals_to_zero();
}

ScopedThreads::ScopedThreads(int n) : previous_(omp_get_max_threads()) {
  if (n > 0 && n != previous_) omp_set_num_threads(n);
}

ScopedThreads::~ScopedThreads() {
  if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

void flush_denormals_to_zero() {
#if defined(__SSE__)
  // MXCSR is per thread: set FTZ (bit 15) and DAZ (bit 6) on the caller and on every thread of the
  // OpenMP pool, which OpenBLAS's OpenMP build shares.
  auto set = [] { _mm_setcsr(_mm_getcsr() | 0x8040); };
  set();
#pragma omp parallel
  set();
#endif
}

}  // namespace retnet
