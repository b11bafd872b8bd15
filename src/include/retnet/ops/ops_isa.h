#pragma once
// Per-level entry points of the elementwise and row kernels of the layer loops and of training
// (rmsnorm_kernels.cpp, activation_kernels.cpp, rotation_kernels.cpp, optimizer_kernels.cpp),
// compiled once per instruction-set level (retnet/core/isa_kernels.h). Each has the contract of
// the public function of the same name (rmsnorm.h, activation.h, rotation.h); the public ones
// call the variant of kernel_isa(). Tests call one level's variant with RETNET_ISA_VARIANT.
#include <cstdint>

#include "retnet/core/isa_kernels.h"
#include "retnet/model/activation_kind.h"
#include "retnet/ops/rotation.h"

namespace retnet {

RETNET_ISA_DECLARE(void rmsnorm_forward(const float* x, int64_t ldx, const float* w, float* y,
                                        int64_t ldy, float* rstd, int64_t N, int64_t D, float eps))
RETNET_ISA_DECLARE(void rmsnorm_backward(const float* x, int64_t ldx, const float* w,
                                         const float* rstd, const float* dy, int64_t ldy, float* dx,
                                         int64_t lddx, float* dw, int64_t N, int64_t D))
RETNET_ISA_DECLARE(void gated_activation_forward(Activation act, const float* a, int64_t lda,
                                                 const float* b, int64_t ldb, float* out,
                                                 int64_t ldo, int64_t N, int64_t D))
RETNET_ISA_DECLARE(void gated_activation_backward(Activation act, const float* a, int64_t lda,
                                                  const float* b, int64_t ldb, const float* dout,
                                                  int64_t ldd, float* da, int64_t ldda, float* db,
                                                  int64_t lddb, int64_t N, int64_t D))
RETNET_ISA_DECLARE(void rotate_with_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H,
                                          int64_t Dk, const float* table, int64_t sequence_stride,
                                          RotationDirection direction, RotationPairs pairs))
// AdamW's step over n floats (optimizer.cpp holds the formula's scalars): m, v and p updated in
// place; decay[i] != 0 where weight decay applies.
RETNET_ISA_DECLARE(void adamw_step(float* p, float* m, float* v, const float* g,
                                   const uint8_t* decay, int64_t n, float b1, float b2,
                                   float step_size, float inv_sqrt_bc2, float eps,
                                   float decay_rate))
// The sum of g[i]^2 in double, and g[i] *= s: gradient clipping's two passes.
RETNET_ISA_DECLARE(double sum_of_squares(const float* g, int64_t n))
RETNET_ISA_DECLARE(void scale_in_place(float* g, int64_t n, float s))

}  // namespace retnet
