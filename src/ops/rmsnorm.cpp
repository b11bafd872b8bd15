#include "retnet/ops/rmsnorm.h"

#include <cmath>

namespace retnet {

void rmsnorm_forward(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                     float* rstd, int64_t N, int64_t D, float eps) {
#pragma omp parallel for schedule(static) if (N * D > 32768)
  for (int64_t n = 0; n < N; ++n) {
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
  }
}

}  // namespace retnet
