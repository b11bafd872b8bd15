#pragma once
// Internal to the linear and performer mixers: the block both run (kernelised causal linear
// attention over the layer's feature map: elu + 1, or FAVOR+ over the Performer's matrix), its
// state size and its FLOPs.
#include <cstdint>

#include "retnet/model/mixer_layer.h"

namespace retnet::detail {

const LayerMixer& kernel_attention_block();
// Floats of one sequence's state per layer, and the FLOPs per token of the mixer's core.
int64_t kernel_attention_state_floats(const Config& c);
double kernel_attention_core_flops(const Config& c, int64_t T, Form form, int64_t chunk);

}  // namespace retnet::detail
