// Decode's matrix-vector products in isolation: the default model's weight matrices, one row each,
// in the order a decode step reads them, against a plain read of the same bytes (the bandwidth
// ceiling). Build: see dev/decode/README.md.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "retnet/core/gemm.h"

using namespace retnet;

int main() {
  struct Mat { int64_t n, k; };
  std::vector<Mat> mats;
  for (int l = 0; l < 4; ++l) mats.insert(mats.end(), {{1536, 256}, {256, 512}, {1024, 256}, {256, 512}});
  mats.push_back({256, 256});
  std::vector<std::vector<float>> w;
  size_t bytes = 0;
  for (auto m : mats) {
    w.emplace_back(m.n * m.k, 0.01f);
    bytes += m.n * m.k * 4;
  }
  std::vector<float> x(512, 1.f), y(1536);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<double> t_gemv, t_read;
    for (int r = 0; r < 400; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < mats.size(); ++i)
        skinny_gemm_nt(1, mats[i].n, mats[i].k, x.data(), mats[i].k, w[i].data(), mats[i].k, 0.f,
                       y.data(), mats[i].n);
      auto t1 = std::chrono::steady_clock::now();
      float total = 0;
      for (size_t i = 0; i < mats.size(); ++i) {
        const float* p = w[i].data();
        const int64_t n = mats[i].n * mats[i].k;
#pragma omp parallel for reduction(+ : total) schedule(static)
        for (int64_t j = 0; j < n; j += 16) total += _mm512_reduce_add_ps(_mm512_loadu_ps(p + j));
      }
      auto t2 = std::chrono::steady_clock::now();
      if (total < 0) std::printf("?");
      t_gemv.push_back(std::chrono::duration<double>(t1 - t0).count());
      t_read.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    std::sort(t_gemv.begin(), t_gemv.end());
    std::sort(t_read.begin(), t_read.end());
    const double g = t_gemv[t_gemv.size() / 2], rd = t_read[t_read.size() / 2];
    std::printf("%d threads: %zu weight bytes; GEMV sweep %.3f ms (%.1f GB/s), plain read %.3f ms "
                "(%.1f GB/s), GEMV/read %.2f\n",
                threads, bytes, 1e3 * g, bytes / g / 1e9, 1e3 * rd, bytes / rd / 1e9, g / rd);
  }
}
