// The packed kernel's speed by row count with its weights in L2 (a [256, 256] product, 256 KiB),
// one thread, median of 2000: how fast each pass shape (1 to 4 rows, 6, 5 + 5, 6 + 5 + 5) computes.
// Usage: tile_rows [rows] (default: 1 to 16 rows). Build: README.md.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "retnet/core/gemm.h"

using namespace retnet;

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  std::vector<int64_t> row_counts{1, 2, 3, 4, 6, 7, 8, 9, 10, 13, 16};
  if (argc > 1) row_counts.assign(1, std::atol(argv[1]));
  for (int64_t M : row_counts) {
    const int64_t N = 256, K = 256;
    std::vector<float> A(M * K, 0.5f), W(N * K, 0.01f), C(M * N);
    std::vector<float> P(packed_weight_elements(N, K));
    pack_weights(W.data(), N, K, K, P.data());
    std::vector<double> ts;
    for (int r = 0; r < 2000; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      packed_gemm_nt(M, N, K, A.data(), K, P.data(), 0.f, C.data(), N);
      ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    std::printf("M=%ld, 1 thread, weights in L2: %.1f GFLOP/s\n", static_cast<long>(M),
                2.0 * M * N * K / ts[1000] / 1e9);
  }
}
