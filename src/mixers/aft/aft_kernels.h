#pragma once
// Inner loops shared by the AFT-full forward, backward and decode kernels (internal header).
// Definition and numerics: src/include/retnet/mixers/aft.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "retnet/core/error.h"
#include "retnet/core/tensor.h"
#include "retnet/ops/fast_exp.h"

namespace retnet::aft_detail {

inline size_t thread_slots() { return static_cast<size_t>(std::max(omp_get_max_threads(), 1)); }

// The bias of a key `distance` tokens before its query.
inline float position_bias(const float* bias, int64_t L, int64_t distance) {
  return bias[std::min(distance, L - 1)];
}

// One key folded into one query's online softmax over `width` channels: e = w + k, and with
// d = e - M the single exponential x = exp(-|d|) is either the new term (d <= 0) or the rescale
// of the old sums (d > 0, e is the new maximum and its own term is 1). M starts at -inf (d = +inf,
// x = 0: the first key replaces the empty sums). Branch-free selects, so the loop vectorises.
inline void online_update(const float* k, const float* v, float w, float* M, float* num, float* den,
                          int64_t width) {
#pragma omp simd
  for (int64_t c = 0; c < width; ++c) {
    const float e = w + k[c];
    const float d = e - M[c];
    const float x = fast_exp_nonpositive(-std::fabs(d));
    const bool up = d > 0.f;
    const float old_scale = up ? x : 1.f, term = up ? 1.f : x;
    num[c] = num[c] * old_scale + term * v[c];
    den[c] = den[c] * old_scale + term;
    M[c] = up ? e : M[c];
  }
}

// sigmoid(x) = 1 / (1 + exp(-x)): 0 (not NaN) for very negative x, 1 for very positive x.
#pragma omp declare simd notinbranch
inline float sigmoid(float x) { return 1.f / (1.f + fast_exp(-x)); }

// Checks that q, k, v, out are [B, T, C] views with unit last stride; returns (B, T, C).
struct Dims {
  int64_t B, T, C;
};
inline Dims check_dims(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const char* what) {
  const Dims d{q.shape[0], q.shape[1], q.shape[2]};
  auto same = [&](const TensorView& t) {
    return t.ndim == 3 && t.shape[0] == d.B && t.shape[1] == d.T && t.shape[2] == d.C &&
           t.stride[2] == 1 && t.data != nullptr;
  };
  RETNET_CHECK(same(q) && same(k) && same(v) && same(out),
               "{}: q, k, v and out must be [B, T, C] views with unit stride in the last dim; "
               "got q [{}, {}, {}] ({} dims), k [{}, {}, {}], v [{}, {}, {}], out [{}, {}, {}]",
               what, q.shape[0], q.shape[1], q.shape[2], q.ndim, k.shape[0], k.shape[1], k.shape[2],
               v.shape[0], v.shape[1], v.shape[2], out.shape[0], out.shape[1], out.shape[2]);
  RETNET_CHECK(d.C >= 1, "{}: C must be positive, got {}", what, d.C);
  return d;
}

inline void check_bias(const float* bias, int64_t L, const char* what) {
  RETNET_CHECK(bias != nullptr && L >= 1,
               "{}: the position bias needs L >= 1 entries, got L {} ({})", what, L,
               bias ? "non-null" : "null pointer");
}

inline int64_t channel_blocks(int64_t C, int64_t block) { return (C + block - 1) / block; }

}  // namespace retnet::aft_detail
