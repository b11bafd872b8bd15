#pragma once
// Internal to the rwkv and aft_simple mixers: the decay attention block both run, its state size
// and its FLOPs.
#include <cstdint>

#include "retnet/model/mixer_layer.h"

namespace retnet::detail {

const LayerMixer& decay_block();
// Floats of one sequence's state per layer, and the FLOPs per token of the mixer's core.
int64_t decay_state_floats(const Config& c);
double decay_core_flops(const Config& c, int64_t T, Form form, int64_t chunk);

}  // namespace retnet::detail
