// Each of a decode step's product shapes (qkvg [1536, 256], out and fc2 [256, 512], fc1 [1024,
// 256], the logits [256, 256]) repeated with its weights hot: GFLOP/s at M rows on T threads,
// median of 3000. Usage: product_shapes [rows = 4] [threads = 2]. Build: README.md.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "retnet/core/gemm.h"
using namespace retnet;
int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? std::atol(argv[1]) : 4;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  omp_set_num_threads(threads);
  for (auto [N, K] :
       {std::pair<int64_t, int64_t>{1536, 256}, {256, 512}, {1024, 256}, {256, 256}}) {
    std::vector<float> w(N * K, 0.01f), P(packed_weight_elements(N, K)), A(M * K, 0.5f), C(M * N);
    pack_weights(w.data(), N, K, K, P.data());
    std::vector<double> t;
    for (int r = 0; r < 3000; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      packed_gemm_nt(M, N, K, A.data(), K, P.data(), 0.f, C.data(), N);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("M=%ld N=%ld K=%ld %d threads: %.2f us = %.1f GFLOP/s\n", (long)M, (long)N, (long)K,
                threads, t[1500] * 1e6, 2.0 * M * N * K / t[1500] / 1e9);
  }
}
