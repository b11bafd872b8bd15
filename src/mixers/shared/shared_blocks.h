#pragma once
// Internal to the mixers that run one block over specs of their own: each block, the floats of
// one sequence's state per layer, and the FLOPs per token of the mixer's core.
#include <cstdint>

#include "retnet/model/mixer_layer.h"

namespace retnet::detail {

// Kernelised causal linear attention over the layer's feature map: elu + 1 (linear) or FAVOR+
// over the Performer's matrix (performer).
const LayerMixer& kernel_attention_block();
int64_t kernel_attention_state_floats(const Config& c);
double kernel_attention_core_flops(const Config& c, int64_t T, Form form, int64_t chunk);

// Channel-wise decay attention: with learned decays and bonus (rwkv) or none (aft_simple).
const LayerMixer& decay_block();
int64_t decay_state_floats(const Config& c);
double decay_core_flops(const Config& c, int64_t T, Form form, int64_t chunk);

}  // namespace retnet::detail
