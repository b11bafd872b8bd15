// AFT-full's loops over channels (aft_rows.h), compiled once per instruction-set level
// (retnet/core/isa_kernels.h). Definition and numerics: src/include/retnet/mixers/aft.h.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "aft_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

// aft_kernels.h's helpers, file-local (isa_kernels.h).
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

}  // namespace

void aft_fold_keys(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t m0,
                   int64_t m1, int64_t n, const float* bias, int64_t L, float* M, float* num,
                   float* den, int64_t width) {
  for (int64_t m = m0; m < m1; ++m)
    online_update(k + m * ldk, v + m * ldv, position_bias(bias, L, n - m), M, num, den, width);
}

void aft_gated_ratio(const float* q, const float* num, const float* den, float* out,
                     int64_t width) {
#pragma omp simd
  for (int64_t c = 0; c < width; ++c) out[c] = sigmoid(q[c]) * (num[c] / den[c]);
}

void aft_merge_partials(const float* partials, int64_t S, int64_t C, const float* q, float* out) {
  const int64_t stride = 3 * C;
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < S; ++s) m = std::max(m, partials[s * stride + c]);
    float num = 0.f, den = 0.f;
    for (int64_t s = 0; s < S; ++s) {
      const float* p = partials + s * stride;
      const float w = fast_exp_nonpositive(p[c] - m);  // 0 for an empty range (max -inf)
      num += w * p[C + c];
      den += w * p[2 * C + c];
    }
    out[c] = sigmoid(q[c]) * (num / den);
  }
}

void aft_backward_row(const AftBackwardRow& r, int64_t n, int64_t m0, int64_t m1,
                      const float* bias, int64_t L, float* g, float* inv_den, double* d_bias,
                      int64_t width) {
  const float* M = r.row_max;
  const float* ratio = r.ratio;
#pragma omp simd
  for (int64_t c = 0; c < width; ++c) {
    g[c] = r.d_out[c] * sigmoid(r.q[c]);
    inv_den[c] = 1.f / r.denominator[c];
  }
  for (int64_t m = m0; m < m1; ++m) {
    const float w = position_bias(bias, L, n - m);
    const float* k = r.k + m * r.ldk;
    const float* v = r.v + m * r.ldv;
    float* dk_m = r.dk + (m - m0) * r.ld_acc;
    float* dv_m = r.dv + (m - m0) * r.ld_acc;
    float de_sum = 0.f;
#pragma omp simd reduction(+ : de_sum)
    for (int64_t c = 0; c < width; ++c) {
      const float gp = fast_exp_nonpositive((w + k[c]) - M[c]) * inv_den[c] * g[c];
      const float de = gp * (v[c] - ratio[c]);
      dv_m[c] += gp;
      dk_m[c] += de;
      de_sum += de;
    }
    d_bias[std::min(n - m, L - 1)] += de_sum;
  }
}

void aft_query_grad_row(const float* q, const float* d_out, const float* r, float* d_q,
                        int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float sg = sigmoid(q[c]);
    d_q[c] += d_out[c] * r[c] * sg * (1.f - sg);
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
