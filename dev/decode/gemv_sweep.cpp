// Decode's matrix-vector products in isolation: the default model's weight matrices, one row each,
// in the order a decode step reads them, against a plain read of the same bytes (the bandwidth
// ceiling). Build: see dev/decode/README.md.
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
  std::vector<std::vector<float>> w, packed;
  size_t bytes = 0;
  for (auto m : mats) {
    w.emplace_back(m.n * m.k, 0.01f);
    packed.emplace_back(packed_weight_elements(m.n, m.k));
    pack_weights(w.back().data(), m.n, m.k, m.k, packed.back().data());
    bytes += m.n * m.k * 4;
  }
  std::vector<float> x(512, 1.f), y(1536);
  // Median seconds of 400 sweeps; each variant runs alone so that only its own bytes are hot
  // (the raw and the packed weights together would not fit this machine's L3).
  auto median_of = [](auto&& sweep) {
    std::vector<double> t;
    for (int r = 0; r < 400; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      sweep();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const double skinny = median_of([&] {
      for (size_t i = 0; i < mats.size(); ++i)
        skinny_gemm_nt(1, mats[i].n, mats[i].k, x.data(), mats[i].k, w[i].data(), mats[i].k, 0.f,
                       y.data(), mats[i].n);
    });
    const double packed_time = median_of([&] {
      for (size_t i = 0; i < mats.size(); ++i)
        packed_gemm_nt(1, mats[i].n, mats[i].k, x.data(), mats[i].k, packed[i].data(), 0.f,
                       y.data(), mats[i].n);
    });
    float total = 0;
    const double read = median_of([&] {
      for (size_t i = 0; i < mats.size(); ++i) {
        const float* p = packed[i].data();
        const int64_t n = static_cast<int64_t>(packed[i].size()) / 64 * 64;
        // One float per 64-byte line brings every line in; four independent sums per iteration.
#pragma omp parallel for reduction(+ : total) schedule(static)
        for (int64_t j = 0; j < n; j += 64) total += (p[j] + p[j + 16]) + (p[j + 32] + p[j + 48]);
      }
    });
    if (total < 0) std::printf("?");
    auto gbs = [&](double t) { return bytes / t / 1e9; };
    std::printf("%d threads: %zu weight bytes; skinny %.3f ms (%.1f GB/s), packed %.3f ms "
                "(%.1f GB/s), plain read %.3f ms (%.1f GB/s), packed/read %.2f\n",
                threads, bytes, 1e3 * skinny, gbs(skinny), 1e3 * packed_time, gbs(packed_time),
                1e3 * read, gbs(read), packed_time / read);
  }
}
