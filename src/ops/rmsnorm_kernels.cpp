// rmsnorm's forward and backward rows (rmsnorm.h), compiled once per instruction-set level
// (retnet/core/isa_kernels.h); rmsnorm.cpp picks one.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include <cmath>

#include "retnet/core/parallel.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {
namespace RETNET_ISA_NS {

void rmsnorm_forward(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                     float* rstd, int64_t N, int64_t D, float eps) {
  parallel_for_if(N * D > 32768, N, [&](int64_t n) {
    const float* xr = x + n * ldx;
    float* yr = y + n * ldy;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    float r = 1.f / std::sqrt(ss / static_cast<float>(D) + eps);
    if (rstd) rstd[n] = r;
    if (w) {
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * r * w[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * r;
    }
  });
}

void rmsnorm_backward(const float* x, int64_t ldx, const float* w, const float* rstd,
                      const float* dy, int64_t ldy, float* dx, int64_t lddx, float* dw, int64_t N,
                      int64_t D) {
  // y_i = x_i r w_i, r = (mean(x^2) + eps)^(-1/2):
  // dx_i = r w_i dy_i - x_i r^3 / D * sum_j w_j dy_j x_j;  dw_i = sum_n dy_i x_i r.
  parallel_for_if(N * D > 32768, N, [&](int64_t n) {
    const float* xr = x + n * ldx;
    const float* g = dy + n * ldy;
    float* d = dx + n * lddx;
    const float r = rstd[n];
    float dot = 0.f;
    for (int64_t i = 0; i < D; ++i) dot += (w ? w[i] : 1.f) * g[i] * xr[i];
    const float c = dot * r * r * r / static_cast<float>(D);
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) d[i] += r * (w ? w[i] : 1.f) * g[i] - c * xr[i];
  });
  if (dw) {
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x + n * ldx;
      const float* g = dy + n * ldy;
      const float r = rstd[n];
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) dw[i] += g[i] * xr[i] * r;
    }
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
