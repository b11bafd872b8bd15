// One token of causal linear attention's recurrent step (linear_attention_step.h), compiled once
// per instruction-set level (retnet/core/isa_kernels.h).
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "linear_attention_step.h"

#include <algorithm>

namespace retnet {
namespace RETNET_ISA_NS {

void linear_attention_token_step(float* S, int64_t W, int64_t F, const float* phi_q,
                                 const float* phi_k, const float* vaug, float* aug) {
  std::fill(aug, aug + W, 0.f);
  for (int64_t i = 0; i < F; ++i) {
    float* s = S + i * W;
    const float ki = phi_k[i], qi = phi_q[i];
#pragma omp simd
    for (int64_t j = 0; j < W; ++j) {
      s[j] += ki * vaug[j];
      aug[j] += qi * s[j];
    }
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
