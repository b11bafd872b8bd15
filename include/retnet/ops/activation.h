#pragma once
// Pointwise activations. gelu is the exact erf form (torch's F.gelu default); swish is x*sigmoid(x).
#include <cmath>
#include <cstdint>
#include <string>

#include "retnet/ops/fast_exp.h"

namespace retnet {

enum class Activation { Gelu, Swish };

Activation parse_activation(const std::string& name);  // "gelu" | "swish" (alias "silu")
const char* activation_name(Activation a);

inline float gelu(float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); }
// swish through the vectorisable exp (2 ulp): libm's scalar expf was a tenth of a training step.
#pragma omp declare simd notinbranch
inline float swish(float x) { return x / (1.f + fast_exp(-x)); }
inline float activate(Activation a, float x) { return a == Activation::Gelu ? gelu(x) : swish(x); }

// Derivatives of the activations.
inline float gelu_grad(float x) {
  return 0.5f * (1.f + std::erf(x * 0.70710678118654752f)) +
         x * 0.39894228040143268f * std::exp(-0.5f * x * x);
}
#pragma omp declare simd notinbranch
inline float swish_grad(float x) {
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
