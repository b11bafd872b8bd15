// The loops of retention's parallel, chunkwise and scan forms outside their matrix products
// (retention_form_kernels.h), compiled once per instruction-set level
// (retnet/core/isa_kernels.h). Each sum runs in the order the definition gives, so every level
// differs from another only where it fuses a multiply and an add.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "retention_form_kernels.h"

#include <algorithm>

namespace retnet {
namespace RETNET_ISA_NS {

void retention_decay_mask(float* P, int64_t ld, int64_t n0, int64_t n1, int64_t cols,
                          const float* gp, float* row_sums) {
  for (int64_t n = n0; n < n1; ++n) {
    float* p = P + n * ld;
    const float* g = gp + n;  // g[-m] = gp[n - m]
#pragma omp simd
    for (int64_t m = 0; m <= n; ++m) p[m] *= g[-m];
    std::fill(p + n + 1, p + cols, 0.f);
    if (row_sums) {
      float s = 0.f;
      for (int64_t m = 0; m <= n; ++m) s += p[m];
      row_sums[n] = s;
    }
  }
}

void retention_scale_rows(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows,
                          int64_t cols, const float* factor, int64_t factor_step) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    float* d = dst + r * ldd;
    const float f = factor[r * factor_step];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = s[c] * f;
  }
}

void retention_scale_add(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) y[e] = a * x[e] + y[e];
}

void retention_read_state(const float* X, int64_t W, int64_t Dk, const float* q, float* aug) {
  std::fill(aug, aug + W, 0.f);
  for (int64_t i = 0; i < Dk; ++i) {
    const float qi = q[i];
    const float* x = X + i * W;
#pragma omp simd
    for (int64_t j = 0; j < W; ++j) aug[j] += qi * x[j];
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
