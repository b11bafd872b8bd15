// The inputs of the retention heads sweep, shared by `retnet bench paper` and micro/bench_retention:
// one retention layer over T = 2048 tokens with 512 key and 512 value channels split over H heads.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "retnet/core/rng.h"
#include "retnet/mixers/retention.h"

namespace retnet {

// q, k, v: [1, T, H, D] with seeded normal values; one decay per head. Not copyable: `args` points
// into the vectors.
struct RetentionBenchSetup {
  static constexpr int64_t T = 2048, channels = 512;
  int64_t H, Dk, Dv;
  std::vector<float> q, k, v, out, state;
  std::vector<double> gammas;
  RetentionArgs args;

  RetentionBenchSetup(int64_t heads, int64_t chunk)
      : H(heads),
        Dk(channels / heads),
        Dv(channels / heads),
        q(T * channels),
        k(T * channels),
        v(T * channels),
        out(T * channels),
        state(H * retention_state_floats_per_head(Dk, Dv)),
        gammas(H) {
    Philox rng(7);
    for (int64_t i = 0; i < T * channels; ++i) {
      q[i] = static_cast<float>(rng.normal(0, i));
      k[i] = static_cast<float>(rng.normal(1, i) / 8);
      v[i] = static_cast<float>(rng.normal(2, i));
    }
    for (int64_t h = 0; h < H; ++h) gammas[h] = 1.0 - std::exp2(-5.0 - h % 8);
    args.q = view(q, Dk);
    args.k = view(k, Dk);
    args.v = view(v, Dv);
    args.out = view(out, Dv);
    args.gammas = gammas.data();
    args.state = state.data();
    args.chunk = chunk;
  }
  RetentionBenchSetup(const RetentionBenchSetup&) = delete;
  RetentionBenchSetup& operator=(const RetentionBenchSetup&) = delete;

  int64_t workspace_floats(Form form) const {
    return retention_workspace_floats(form, 1, T, H, Dk, Dv, args.chunk, 0);
  }

 private:
  TensorView view(std::vector<float>& x, int64_t last) const {
    TensorView t;
    t.data = x.data();
    t.ndim = 4;
    t.shape = {1, T, H, last};
    t.stride = {T * channels, channels, last, 1};
    return t;
  }
};

}  // namespace retnet
