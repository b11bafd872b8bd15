// AFT-simple's spec: a running average of v weighted by exp(k) with a sigmoid gate, the decay
// attention block (shared/decay_block.cpp) with no decay and no bonus.
#include "../shared/shared_blocks.h"

namespace retnet::detail {

const MixerSpec& aft_simple_mixer_spec() {
  // The kernel's pairwise chunks cost O(chunk) per token: 16 is its fast size.
  static const MixerSpec spec{
      .name = "aft-simple", .scope = "aft_simple",
      .summary = "AFT-simple: a running average of v weighted by exp(k), sigmoid gate",
      .per_channel = true, .forms = {true, true, true, false}, .preferred_chunk = 16,
      .state_floats_per_layer = decay_state_floats,
      .core_flops_per_token = decay_core_flops, .block = decay_block};
  return spec;
}

}  // namespace retnet::detail
