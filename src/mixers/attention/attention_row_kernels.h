#pragma once
// Per-level entry points of attention_row_kernels.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): the softmax rows of the attention forward, backward and decode
// kernels. attention_kernels.h calls the variant of kernel_isa().
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// x[j] = exp(x[j] - shift) for j < n, shift >= max(x) (so the arguments are <= 0); returns their
// sum.
RETNET_ISA_DECLARE(float attention_exp_shifted_sum(float* x, int64_t n, float shift))
// max(init, x[0..n)).
RETNET_ISA_DECLARE(float attention_max_of(const float* x, int64_t n, float init))
// D[n] = a_n . b_n for T pairs of rows of width n (a rows lda floats apart, b rows ldb): the
// backward's row terms dO_n . o_n.
RETNET_ISA_DECLARE(void attention_row_dots(const float* a, int64_t lda, const float* b,
                                           int64_t ldb, int64_t T, int64_t n, float* D))

}  // namespace retnet
