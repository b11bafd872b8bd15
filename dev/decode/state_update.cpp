// The recurrent retention update of a batched decode step on its own, with the state out of cache
// as in the model (the weights' stream evicts it between steps): 4 layers of B x 4 heads
// (d_k 64, d_v 128: the default model's 516 KiB per sequence), a 16 MB read before each layer.
// Median us per step. A/B: link against two builds of libretnet.a and alternate the binaries.
// Usage: state_update [batch = 16] [steps = 100]. Build: see README.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/tensor.h"
#include "retnet/mixers/retention.h"

using namespace retnet;

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atol(argv[1]) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 100;
  const int64_t layers = 4, H = 4, Dk = 64, Dv = 128;
  const int64_t per_seq = H * retention_state_floats_per_head(Dk, Dv);
  std::vector<std::vector<float>> states(layers, std::vector<float>(B * per_seq, 0.f));
  std::vector<float> q(B * H * Dk, 0.1f), k(B * H * Dk, 0.2f), v(B * H * Dv, 0.3f), out(B * H * Dv);
  std::vector<double> gammas(H, 0.97);
  std::vector<float> weights(size_t{4} << 20, 1.f);  // 16 MB, like the weight stream
  Arena arena(retention_workspace_floats(Form::Recurrent, B, 1, H, Dk, Dv, 64, 0));
  RetentionArgs a;
  a.q = TensorView::contiguous(q.data(), {B, 1, H, Dk});
  a.k = TensorView::contiguous(k.data(), {B, 1, H, Dk});
  a.v = TensorView::contiguous(v.data(), {B, 1, H, Dv});
  a.out = TensorView::contiguous(out.data(), {B, 1, H, Dv});
  a.gammas = gammas.data();
  a.state_stride = per_seq;
  std::vector<double> us;
  volatile float sink = 0;
  for (int s = 0; s < steps; ++s) {
    double t = 0;
    for (int64_t l = 0; l < layers; ++l) {
      float sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
      for (size_t i = 0; i < weights.size(); i += 16) sum += weights[i];
      sink = sink + sum;
      a.state = states[l].data();
      arena.reset();
      const auto t0 = std::chrono::steady_clock::now();
      retention_forward(Form::Recurrent, a, arena);
      t += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  std::printf("batch %ld: retention update of 4 layers, median %.1f us per step [%.1f, %.1f]\n",
              static_cast<long>(B), us[us.size() / 2], us.front(), us.back());
}
