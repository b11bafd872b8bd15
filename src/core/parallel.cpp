#include "retnet/core/parallel.h"

#include <omp.h>

#include "retnet/core/gemm.h"

namespace retnet {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  blas_set_num_threads(n);
}

}  // namespace retnet
