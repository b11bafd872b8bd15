// rmsnorm's entry points: the per-level kernels of rmsnorm_kernels.cpp, at kernel_isa()'s level.
#include "retnet/ops/rmsnorm.h"

#include "retnet/ops/ops_isa.h"

namespace retnet {

void rmsnorm_forward(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                     float* rstd, int64_t N, int64_t D, float eps) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), rmsnorm_forward);
  kernel(x, ldx, w, y, ldy, rstd, N, D, eps);
}

void rmsnorm_backward(const float* x, int64_t ldx, const float* w, const float* rstd,
                      const float* dy, int64_t ldy, float* dx, int64_t lddx, float* dw, int64_t N,
                      int64_t D) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), rmsnorm_backward);
  kernel(x, ldx, w, rstd, dy, ldy, dx, lddx, dw, N, D);
}

}  // namespace retnet
