// AdamW's step and gradient clipping's passes (optimizer.cpp), compiled once per instruction-set
// level (retnet/core/isa_kernels.h).
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include <cmath>

#include "retnet/ops/ops_isa.h"

namespace retnet {
namespace RETNET_ISA_NS {

void adamw_step(float* p, float* m, float* v, const float* g, const uint8_t* decay, int64_t n,
                float b1, float b2, float step_size, float inv_sqrt_bc2, float eps,
                float decay_rate) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.f - b1) * g[i];
    v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
    if (decay[i]) p[i] -= decay_rate * p[i];  // decoupled weight decay
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

double sum_of_squares(const float* g, int64_t n) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

void scale_in_place(float* g, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] *= s;
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
