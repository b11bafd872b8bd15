// Decay attention's forward over one block of channels in padded lanes (decay_lanes.h),
// compiled once per instruction-set level (retnet/core/isa_kernels.h).
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "decay_lanes.h"

#include <algorithm>
#include <cmath>

#include "decay_kernels.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

using detail::kCb;
using detail::kEmptyExponent;

// decay_kernels.h's sigmoid_fast, file-local (isa_kernels.h): for r << 0 the clamped exponential
// gives ~1e-38, not inf.
#pragma omp declare simd notinbranch
inline float sigmoid_fast(float r) { return 1.f / (1.f + fast_exp(-r)); }

void write_row(const DecayRows& rows, int64_t t, const float* num, const float* den,
               const float* M) {
  const float* r = rows.r + t * rows.ldr;
  float* out = rows.out + t * rows.ldo;
  const int64_t nc = rows.nc;
#pragma omp simd
  for (int64_t c = 0; c < nc; ++c) out[c] = sigmoid_fast(r[c]) * (num[c] / den[c]);
  if (rows.wkv) {
    float* wkv = rows.wkv + t * rows.ld_saved;
    float* log_den = rows.log_den + t * rows.ld_saved;
    for (int64_t c = 0; c < nc; ++c) {
      wkv[c] = num[c] / den[c];
      log_den[c] = M[c] + std::log(den[c]);
    }
  }
}

// Adds the chunk's tokens j < n, decayed to token n - 1 and scaled by e^-ref: with
// e = exp(k_j - ref - (n - 1 - j) w), num += e v_j and den += e (K, V: packed [n][kCb] rows).
inline void add_decayed_tokens(const float* K, const float* V, int64_t n, const float* w,
                               const float* ref, float* num, float* den) {
  for (int64_t j = 0; j < n; ++j) {
    const float* Kj = K + j * kCb;
    const float* Vj = V + j * kCb;
    const float decay = static_cast<float>(n - 1 - j);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float e = fast_exp_nonpositive((Kj[c] - ref[c]) - decay * w[c]);
      num[c] += e * Vj[c];
      den[c] += e;
    }
  }
}

}  // namespace

void decay_fold_chunk(const float* K, const float* V, int64_t L, const float* w, const float* pe,
                      const float* R, float* a, float* bs, float* p) {
  const float fL = static_cast<float>(L);
#pragma omp simd
  for (int64_t c = 0; c < kCb; ++c) {
    const float e = fast_exp_nonpositive((pe[c] - R[c]) - fL * w[c]);
    a[c] *= e;
    bs[c] *= e;
  }
  add_decayed_tokens(K, V, L, w, R, a, bs);
#pragma omp simd
  for (int64_t c = 0; c < kCb; ++c) p[c] = R[c];
}

void decay_pairwise_chunk(const DecayRows& rows, int64_t t0, int64_t L, const float* K,
                          const float* V, const float* w, const float* u, float* a, float* bs,
                          float* p, bool update) {
  alignas(64) float pe[kCb], R[kCb], M[kCb], num[kCb], den[kCb];
#pragma omp simd
  for (int64_t c = 0; c < kCb; ++c) {
    pe[c] = bs[c] > 0.f ? p[c] : kEmptyExponent;  // the state's exponent; empty: none
    R[c] = pe[c];  // maximum exponent of the terms before the current token
  }
  for (int64_t i = 0; i < L; ++i) {
    const float* Ki = K + i * kCb;
    const float fi = static_cast<float>(i);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      M[c] = std::max(R[c], Ki[c] + u[c]);
      // The state decayed over i tokens; (pe - M) first: both may be ~1e4, their gap is small.
      const float e = fast_exp_nonpositive((pe[c] - M[c]) - fi * w[c]);
      num[c] = e * a[c];
      den[c] = e * bs[c];
    }
    add_decayed_tokens(K, V, i, w, M, num, den);
    const float* Vi = V + i * kCb;
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float e = fast_exp_nonpositive((Ki[c] - M[c]) + u[c]);
      num[c] += e * Vi[c];
      den[c] += e;
      R[c] = std::max(R[c] - w[c], Ki[c]);
    }
    write_row(rows, t0 + i, num, den, M);
  }
  if (update) decay_fold_chunk(K, V, L, w, pe, R, a, bs, p);
}

void decay_recurrent_steps(const DecayRows& rows, int64_t T, const float* k_rows, int64_t ldk,
                           const float* v_rows, int64_t ldv, const float* w, const float* u,
                           float* a, float* bs, float* p) {
  // Padding lanes hold zero inputs, so the per-token loop has a fixed trip count and vectorises.
  alignas(64) float k[kCb] = {}, v[kCb] = {}, M[kCb], num[kCb], den[kCb];
  const int64_t nc = rows.nc;
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(k_rows + t * ldk, nc, k);
    std::copy_n(v_rows + t * ldv, nc, v);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float pe = bs[c] > 0.f ? p[c] : kEmptyExponent;
      // Output: the state and the current token, scaled by their larger exponent.
      M[c] = std::max(pe, u[c] + k[c]);
      const float e1 = fast_exp_nonpositive(pe - M[c]);
      const float e2 = fast_exp_nonpositive((k[c] - M[c]) + u[c]);
      num[c] = e1 * a[c] + e2 * v[c];
      den[c] = e1 * bs[c] + e2;
      // Update: decay the state by one token, add the current one without the bonus. pe - w
      // rounds by up to ulp(pe) / 2 (5e-4 at |pe| ~ 1e4, every token); the rounding error,
      // exact by Sterbenz, goes into a and b instead of accumulating in p.
      const float decayed = pe - w[c];
      const float rounding = (pe - decayed) - w[c];
      const float q = std::max(decayed, k[c]);
      const float f1 = fast_exp_nonpositive((decayed - q) + rounding);
      const float f2 = fast_exp_nonpositive(k[c] - q);
      a[c] = f1 * a[c] + f2 * v[c];
      bs[c] = f1 * bs[c] + f2;
      p[c] = q;
    }
    write_row(rows, t, num, den, M);
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
