// Backward passes of the two training forms of decay attention (the forward's definition is in
// src/include/retnet/mixers/decay_attention.h): the checks of their arguments and the loop over
// (sequence, channel block) tasks, whose loops and their derivation are the per-level
// decay_backward_lanes.cpp.
#include <algorithm>

#include "decay_backward_lanes.h"
#include "decay_kernels.h"
#include "retnet/core/error.h"
#include "retnet/mixers/decay_attention.h"

namespace retnet {
namespace {

using detail::kCb;

using Dims = detail::ChannelDims;

Dims check_grad_args(Form form, const DecayAttentionGradArgs& a) {
  RETNET_CHECK(form == Form::Parallel || form == Form::Chunkwise,
               "decay attention backward exists for the parallel and chunkwise forms, not {}",
               form_name(form));
  RETNET_CHECK(a.wkv != nullptr && a.log_denominators != nullptr,
               "decay attention backward needs the forward's saved wkv and log denominators");
  RETNET_CHECK(a.w && a.u && a.d_w && a.d_u,
               "decay attention backward needs w, u and their gradient buffers d_w, d_u");
  RETNET_CHECK(a.chunk >= 1, "decay attention: chunk size must be at least 1, got {}", a.chunk);
  RETNET_CHECK((a.start_state == nullptr) == (a.d_start_state == nullptr),
               "decay attention backward: give both start_state and d_start_state, or neither");
  RETNET_CHECK(!a.start_state || form == Form::Chunkwise,
               "decay attention backward: a start state needs the chunkwise form, not {}",
               form_name(form));
  RETNET_CHECK(!a.leave_slice || a.start_state,
               "decay attention backward: leave_slice needs start_state and d_start_state");
  const Dims d = detail::channel_dims(a.k, "decay attention backward");
  RETNET_CHECK(!a.start_state || d.B == 1 || a.state_stride >= decay_attention_state_floats(d.C),
               "decay attention backward: state stride {} is below the {} floats of one "
               "sequence's state",
               a.state_stride, decay_attention_state_floats(d.C));
  detail::check_channel_views(d, {{&a.r, "r"},
                                  {&a.v, "v"},
                                  {&a.d_out, "d_out"},
                                  {&a.d_r, "d_r"},
                                  {&a.d_k, "d_k"},
                                  {&a.d_v, "d_v"}});
  return d;
}

size_t backward_scratch(int64_t L) { return 7 * L * kCb; }

}  // namespace

size_t decay_attention_backward_workspace_floats(Form form, int64_t B, int64_t T,
                                                 int64_t C, int64_t chunk) {
  const int64_t L =
      form == Form::Parallel ? T : std::min(std::max<int64_t>(chunk, 1), T);
  return 2 * Arena::footprint(B * C) + detail::channel_loop_footprint(B, C, backward_scratch(L));
}

void decay_attention_backward(Form form, const DecayAttentionGradArgs& a,
                              Arena& arena) {
  const Dims d = check_grad_args(form, a);
  if (d.B * d.T * d.C == 0) return;
  const int64_t chunk = form == Form::Parallel ? d.T : std::min(a.chunk, d.T);
  // Per-sequence partial sums of d_w and d_u, added up in a fixed order afterwards.
  float* dw_parts = arena.alloc(d.B * d.C);
  float* du_parts = arena.alloc(d.B * d.C);
  static const auto start_state_gradient =
      RETNET_ISA_VARIANT(kernel_isa(), decay_start_state_gradient);
  static const auto backward_block = RETNET_ISA_VARIANT(kernel_isa(), decay_backward_block);
  if (a.start_state) {
    // The start state's gradient from these tokens first: the slices after exchange theirs.
    detail::for_each_channel_block(d.B, d.C, arena, 0, [&](int64_t b, int64_t c0, int64_t nc,
                                                           float*) {
      start_state_gradient(a, d, b, c0, nc, a.d_start_state + b * a.state_stride);
    });
    if (a.leave_slice) a.leave_slice();
  }
  detail::for_each_channel_block(
      d.B, d.C, arena, backward_scratch(chunk), [&](int64_t b, int64_t c0, int64_t nc, float* s) {
        backward_block(a, d, b, c0, nc, chunk, dw_parts + b * d.C + c0, du_parts + b * d.C + c0, s);
      });
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t c = 0; c < d.C; ++c) {
      a.d_w[c] += dw_parts[b * d.C + c];
      a.d_u[c] += du_parts[b * d.C + c];
    }
}

}  // namespace retnet
