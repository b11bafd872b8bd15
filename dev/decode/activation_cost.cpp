// ns per element of the gated activation (gelu, swish) at a decode step's sizes (N rows of 1024),
// 1 and 2 threads, median of 3000 calls. Usage: activation_cost. Build: README.md.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "retnet/ops/activation.h"

using namespace retnet;

int main() {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Activation act : {Activation::Gelu, Activation::Swish})
      for (int64_t N : {4, 8, 16}) {
        const int64_t D = 1024;
        std::vector<float> a(N * 2 * D), out(N * D);
        for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(int(i % 4000) - 2000);
        std::vector<double> ts;
        for (int r = 0; r < 3000; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          gated_activation_forward(act, a.data(), 2 * D, a.data() + D, 2 * D, out.data(), D, N, D);
          ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ts.begin(), ts.end());
        std::printf("%d threads, %s, N=%ld: %.2f us, %.3f ns per element\n", threads,
                    activation_name(act), static_cast<long>(N), ts[1500] * 1e6,
                    ts[1500] * 1e9 / static_cast<double>(N * D));
      }
  }
}
