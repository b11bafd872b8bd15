#pragma once
// Per-level entry points of decay_backward_lanes.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): decay attention's backward over one (sequence, channel block) of
// kDecayChannelBlock channels. decay_attention_backward.cpp calls the variant of kernel_isa().
#include <cstdint>

#include "decay_kernels.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/mixers/decay_attention.h"

namespace retnet {

// The start state's gradient from sequence b's tokens at channels [c0, c0 + nc): out [3, C] rows
// (x, y, rho) (decay_backward_lanes.cpp's top comment).
RETNET_ISA_DECLARE(void decay_start_state_gradient(const DecayAttentionGradArgs& a,
                                                   const detail::ChannelDims& d, int64_t b,
                                                   int64_t c0, int64_t nc, float* out))
// The gradients of sequence b's channels [c0, c0 + nc), chunks of `chunk` tokens last to first:
// d_r, d_k, d_v added in place; this block's shares of d_w and d_u into dw_out, du_out [nc].
// scratch: 7 chunk kDecayChannelBlock floats.
RETNET_ISA_DECLARE(void decay_backward_block(const DecayAttentionGradArgs& a,
                                             const detail::ChannelDims& d, int64_t b, int64_t c0,
                                             int64_t nc, int64_t chunk, float* dw_out,
                                             float* du_out, float* scratch))

}  // namespace retnet
