#pragma once
// Pointwise activations. gelu is the exact erf form (torch's F.gelu default); swish is x*sigmoid(x).
#include <cmath>
#include <cstdint>
#include <string>

#include "retnet/model/activation_kind.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {

// The pointwise functions below are static: the per-level kernel files (activation_kernels.cpp,
// compiled once per instruction-set level) use them, and a function the compiler keeps out of
// line must stay each object's own, never one weak copy the linker shares between levels (the
// AVX-512 one on a CPU without it, or one level's rounding in every binary).

// erfc(z) for z >= 0: Numerical Recipes' Chebyshev fit erfcc (fractional error < 1.2e-7) through
// the vectorisable exp, so loops over gelu vectorise (libm's scalar erff was the most expensive
// thing in a decode step's serial work: docs/design-notes.md#gated-activation-threads).
#pragma omp declare simd notinbranch
static inline float erfc_nonnegative(float z) {
  const float t = 1.f / (1.f + 0.5f * z);
  const float p =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f +
                                    t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  // exp(-z^2) as exp(-hi) exp(-lo) with z^2 = hi + lo exactly: a rounded z^2 would cost its
  // relative error times z^2 (1e-5 at z = 8).
  const float hi = z * z, lo = std::fma(z, z, -hi);
  return t * fast_exp(-hi) * fast_exp(p - lo);
}
// 1 + erf(u) = erfc(-u): no cancellation for negative u, where gelu's value is small.
#pragma omp declare simd notinbranch
static inline float one_plus_erf(float u) {
  const float e = erfc_nonnegative(u < 0.f ? -u : u);
  return u < 0.f ? e : 2.f - e;
}

#pragma omp declare simd notinbranch
static inline float gelu(float x) { return 0.5f * x * one_plus_erf(x * 0.70710678118654752f); }
// swish through the vectorisable exp (2 ulp): libm's scalar expf was a tenth of a training step.
#pragma omp declare simd notinbranch
static inline float swish(float x) { return x / (1.f + fast_exp(-x)); }
static inline float activate(Activation a, float x) {
  return a == Activation::Gelu ? gelu(x) : swish(x);
}

// Derivatives of the activations.
#pragma omp declare simd notinbranch
static inline float gelu_grad(float x) {
  return 0.5f * one_plus_erf(x * 0.70710678118654752f) +
         x * 0.39894228040143268f * fast_exp(-0.5f * x * x);
}
#pragma omp declare simd notinbranch
static inline float swish_grad(float x) {
  float s = 1.f / (1.f + fast_exp(-x));
  return s * (1.f + x * (1.f - s));
}

// Gated product used by the FFN and the retention gate: out[n, i] = act(a[n, i]) * b[n, i].
// a, b, out: [N, D] with row strides lda, ldb, ldo (out may alias b).
void gated_activation_forward(Activation act, const float* a, int64_t lda, const float* b,
                              int64_t ldb, float* out, int64_t ldo, int64_t N, int64_t D);

// Backward of the gated product: da = act'(a) b dout, db = act(a) dout (overwritten, not
// accumulated: they are fresh buffers in every caller). da and db may alias a and b.
void gated_activation_backward(Activation act, const float* a, int64_t lda, const float* b,
                               int64_t ldb, const float* dout, int64_t ldd, float* da,
                               int64_t ldda, float* db, int64_t lddb, int64_t N, int64_t D);

}  // namespace retnet
