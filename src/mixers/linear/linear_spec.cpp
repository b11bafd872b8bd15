// The linear transformer's spec: normalised causal linear attention over the feature map elu + 1
// (the block it shares with the Performer: shared/kernel_attention_block.cpp).
#include "../shared/shared_blocks.h"

namespace retnet::detail {

const MixerSpec& linear_mixer_spec() {
  static const MixerSpec spec{
      .name = "linear", .scope = "linear",
      .summary = "linear transformer: phi = elu + 1, normalised causal linear attention",
      .forms = {true, true, true, false}, .state_floats_per_layer = kernel_attention_state_floats,
      .core_flops_per_token = kernel_attention_core_flops, .block = kernel_attention_block};
  return spec;
}

}  // namespace retnet::detail
