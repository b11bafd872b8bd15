// The exponential rows of the feature maps (feature_map_rows.h), compiled once per
// instruction-set level (retnet/core/isa_kernels.h).
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "feature_map_rows.h"

#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {

void elu_plus_one_row(const float* x, float* phi, int64_t D) {
#pragma omp simd
  for (int64_t i = 0; i < D; ++i) {
    const float e = fast_exp(x[i] < 0.f ? x[i] : 0.f);  // both branches, then a select
    phi[i] = x[i] > 0.f ? x[i] + 1.f : e;
  }
}

void elu_plus_one_row_backward(const float* x, const float* phi, const float* d_phi, float* d_x,
                               int64_t D) {
  // elu(x) + 1 = exp(x) below 0, so its slope there is phi itself.
#pragma omp simd
  for (int64_t i = 0; i < D; ++i) d_x[i] += d_phi[i] * (x[i] > 0.f ? 1.f : phi[i]);
}

void scaled_exp_row(float* p, int64_t m, float shift, float scale) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) p[j] = fast_exp(p[j] - shift) * scale;
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
