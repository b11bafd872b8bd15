#pragma once
// Per-level entry points of decay_lanes.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): decay attention's forward over one block of kDecayChannelBlock
// channels, whose state, w and u sit in padded local lanes (decay_kernels.h). decay_attention.cpp
// and decay_slices.cpp call the variant of kernel_isa().
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// Where one task writes token t's output (pointers already at the block's first channel):
// out[t * ldo + c] = sigmoid(r[t * ldr + c]) num / den for c < nc; where wkv is set, also
// wkv[t * ld_saved + c] = num / den and log_den[t * ld_saved + c] = M + log(den).
struct DecayRows {
  const float* r;
  int64_t ldr;
  float* out;
  int64_t ldo;
  float* wkv;
  float* log_den;
  int64_t ld_saved;
  int64_t nc;
};

// The pairwise form over one chunk of L tokens whose first is t0 (K, V: packed [L][kCb] rows),
// the state (a, bs, p) entering it as one more term; with update, the state becomes the one after
// the chunk.
RETNET_ISA_DECLARE(void decay_pairwise_chunk(const DecayRows& rows, int64_t t0, int64_t L,
                                             const float* K, const float* V, const float* w,
                                             const float* u, float* a, float* bs, float* p,
                                             bool update))
// The recurrent form over T tokens (k, v: rows t at k + t * ldk, v + t * ldv, nc channels),
// updating the state (a, bs, p).
RETNET_ISA_DECLARE(void decay_recurrent_steps(const DecayRows& rows, int64_t T, const float* k,
                                              int64_t ldk, const float* v, int64_t ldv,
                                              const float* w, const float* u, float* a, float* bs,
                                              float* p))
// The state after a chunk of L tokens (K, V: packed [L][kCb] rows) entered with (a, bs, p) and
// exponent pe (kEmptyExponent when empty): every term decayed to the chunk's end and scaled by R,
// the largest of their exponents there (R = max over the chunk of max(R - w, k), from pe).
RETNET_ISA_DECLARE(void decay_fold_chunk(const float* K, const float* V, int64_t L,
                                         const float* w, const float* pe, const float* R, float* a,
                                         float* bs, float* p))

}  // namespace retnet
