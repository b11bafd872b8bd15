#pragma once
// Per-level entry points of attention_decode_kernels.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): the decode step's pass over a range of cached tokens and the merge
// of the ranges' partial softmaxes (attention.cpp calls the variant of kernel_isa()).
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// Keys scored at once by the decode step: its scratch, and the granularity of its online softmax.
inline constexpr int64_t kAttentionDecodeBlock = 256;

// The shapes of one decode step: H query heads reading Hkv kv heads (query head h reads kv head
// h / (H / Hkv)) of Dk and Dv; a cached token's row holds every kv head's key, then every value.
struct AttentionDecodeShape {
  int64_t H, Hkv, Dk, Dv;
};

// Tokens [begin, end) of one sequence's cache rows: the partial softmax of every head, partial
// [H, Dv + 2] = weighted values, then running max, then sum. q: head h's query at q + h * ldq_head;
// scores: [H, kAttentionDecodeBlock] scratch.
RETNET_ISA_DECLARE(void attention_decode_range(const float* q, int64_t ldq_head, const float* rows,
                                               const AttentionDecodeShape& d, int64_t begin,
                                               int64_t end, float* scores, float* partial))
// out [Dv] of head h from the S partials of its sequence (partials[s] = [H, Dv + 2]).
RETNET_ISA_DECLARE(void attention_merge_partials(const float* partials, int64_t S,
                                                 const AttentionDecodeShape& d, int64_t h,
                                                 float* out))

}  // namespace retnet
