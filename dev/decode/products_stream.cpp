// A decode step's 16 weight products (4 layers x qkvg [1536, 256], out [256, 512], fc1 [1024, 256],
// fc2 [256, 512], packed float32, 15 MB: more than L2, so they stream from L3 as in the model) at M
// rows, against one product repeated (its weights stay nearer). Medians of 300, 1 and 2 threads.
// A/B: link against two builds and alternate. Usage: products_stream [rows = 16]. Build: README.md.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "retnet/core/gemm.h"

using namespace retnet;

struct Packed {
  int64_t N, K;
  std::vector<float> panels;
};

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? std::atol(argv[1]) : 16;
  std::vector<Packed> mats;
  for (int l = 0; l < 4; ++l)
    for (auto [N, K] : {std::pair<int64_t, int64_t>{1536, 256}, {256, 512}, {1024, 256}, {256, 512}}) {
      std::vector<float> w(N * K);
      for (auto& x : w) x = 0.01f * static_cast<float>(std::rand() % 100);
      Packed p{N, K, std::vector<float>(packed_weight_elements(N, K))};
      pack_weights(w.data(), N, K, K, p.panels.data());
      mats.push_back(std::move(p));
    }
  std::vector<float> A(M * 1536, 0.5f), C(M * 1536);
  double flop = 0;
  for (const auto& m : mats) flop += 2.0 * M * m.N * m.K;
  auto seconds = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<double> all, one;
    for (int r = 0; r < 300; ++r) {
      all.push_back(seconds([&] {
        for (const auto& m : mats)
          packed_gemm_nt(M, m.N, m.K, A.data(), m.K, m.panels.data(), 0.f, C.data(), m.N);
      }));
      one.push_back(seconds([&] {
        for (int i = 0; i < 16; ++i)
          packed_gemm_nt(M, 1536, 256, A.data(), 256, mats[0].panels.data(), 0.f, C.data(), 1536);
      }) / 16);
    }
    std::sort(all.begin(), all.end());
    std::sort(one.begin(), one.end());
    std::printf("M=%ld, %d threads: all 16 products %.1f us = %.1f GFLOP/s; qkvg repeated %.1f us = "
                "%.1f GFLOP/s\n", static_cast<long>(M), threads, all[150] * 1e6, flop / all[150] / 1e9,
                one[150] * 1e6, 2.0 * M * 1536 * 256 / one[150] / 1e9);
  }
}
