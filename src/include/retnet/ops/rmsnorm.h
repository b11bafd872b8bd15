#pragma once
// RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, per row, in fp32. Used for the pre-norms, the final
// norm, and (without weight) as retention's per-head norm.
#include <cstdint>

namespace retnet {

// x, y: [N, D] with row strides ldx, ldy (may alias when equal); w: [D] or nullptr (no weight);
// rstd: [N] saved for the backward pass, or nullptr.
void rmsnorm_forward(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                     float* rstd, int64_t N, int64_t D, float eps);

// Backward of rmsnorm_forward given its saved rstd: dx += d/dx, dw += d/dw (dw may be nullptr when
// there is no weight). x, dy, dx: [N, D] with row strides ldx, ldy, lddx.
void rmsnorm_backward(const float* x, int64_t ldx, const float* w, const float* rstd,
                      const float* dy, int64_t ldy, float* dx, int64_t lddx, float* dw, int64_t N,
                      int64_t D);

}  // namespace retnet
