#pragma once
// Per-level entry point of retention_step_kernels.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): one token of a retention head's recurrent step, which decoding
// runs for every head of every layer (retention.cpp calls the variant of kernel_isa()).
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// Bytes [begin, end) to pull into the cache while a step visits a state's rows, `step` bytes per
// row visited (begin advances as they are requested).
struct StatePrefetch {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t step = 0;
};

// For a head state S of Dk rows of W floats (the values and the normaliser's column):
// S = g S + k vaug^T and aug = q^T S. `by_rows`: row by row, one sequential stream (a state that
// comes from memory); else by groups of columns whose sums stay in registers, the widest groups
// also requesting `prefetch`'s bytes (a state the cache holds).
RETNET_ISA_DECLARE(void retention_token_step(float* S, int64_t W, int64_t Dk, float g,
                                             const float* q, const float* k, const float* vaug,
                                             float* aug, bool by_rows, StatePrefetch& prefetch))

}  // namespace retnet
