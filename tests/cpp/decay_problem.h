#pragma once
// Random inputs of the decay mixers (rwkv, aft-simple): r, k, v [B, T, C] contiguous, decays
// w >= 0 from none (channel 0, AFT-simple's) to strong, bonuses u of both signs.
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_helpers.h"

namespace retnet::test {

struct DecayInputs {
  int64_t B, T, C;
  std::vector<float> r, k, v;  // [B, T, C] contiguous
  std::vector<float> w, u;     // [C]

  DecayInputs(int64_t b, int64_t t, int64_t c, uint64_t seed, double k_scale)
      : B(b), T(t), C(c) {
    r = random_vector(B * T * C, seed, 1.0, 0);
    k = random_vector(B * T * C, seed, k_scale, 1);
    v = random_vector(B * T * C, seed, 1.0, 2);
    w = random_vector(C, seed, 1.0, 3);
    for (float& x : w) x = std::fabs(x);
    if (C > 1) w[0] = 0.f;
    u = random_vector(C, seed, 1.0, 4);
  }
};

}  // namespace retnet::test
