#pragma once
// Per-level entry point of linear_attention_step.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): one token of causal linear attention's recurrent step, which
// decoding runs for every head of every linear-attention layer (linear_attention.cpp calls the
// variant of kernel_isa()).
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// For a head state S of F rows of W floats (the values and the normaliser's column):
// S += phi(k) vaug^T and aug = phi(q)^T S, in one pass over the rows.
RETNET_ISA_DECLARE(void linear_attention_token_step(float* S, int64_t W, int64_t F,
                                                    const float* phi_q, const float* phi_k,
                                                    const float* vaug, float* aug))

}  // namespace retnet
