// Decode steps of the default model in a tight loop: median ms per step at batch B, for perf and
// for A/B runs of two builds (link each against its own libretnet.a, alternate the binaries).
// Usage: step_loop [steps = 3000] [batch = 1]. Build: see dev/decode/README.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "retnet/infer/session.h"
#include "retnet/model/model.h"

using namespace retnet;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3000;
  const int B = argc > 2 ? std::atoi(argv[2]) : 1;
  Model m = Model::init(Config{}, 1);
  m.prepare_decode(DecodePrecision::F32);
  SessionOptions so;
  so.capacity = B;
  Session s(m, so);
  std::vector<int32_t> tokens(B, 65);
  for (int b = 0; b < B; ++b) {
    s.add_sequence();
    s.prefill(b, tokens.data(), 1);
  }
  constexpr int kWindows = 15;
  std::vector<double> ms;
  for (int w = 0; w < kWindows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps / kWindows; ++i) s.step(tokens.data());
    const std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
    ms.push_back(dt.count() / (steps / kWindows));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("batch %d, %d threads: median %.4f ms/step [%.4f, %.4f] -> %.0f tokens/s\n", B,
              s.decode_threads(), ms[kWindows / 2], ms.front(), ms.back(),
              B / ms[kWindows / 2] * 1e3);
}
