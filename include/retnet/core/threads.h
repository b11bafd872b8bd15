#pragma once
// The engine's threads: one OpenMP pool serves its loops and BLAS.

namespace retnet {

int num_threads();
// Sets the threads used by our loops and by BLAS; n <= 0 means all cores.
void set_num_threads(int n);

}  // namespace retnet
