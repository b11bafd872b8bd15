#pragma once
// A token mixer defined outside the library, to show that one folder and one registration line
// make a mixer every command runs (toy_mixer.cpp).
#include "retnet/model/mixer.h"

namespace retnet::toy {

// Per channel c, with a fixed decay lambda:
//   s_t = lambda s_{t-1} + k_t v_t,   out_t = q_t s_t
// over projections q | k | v of width value_dim; a state of value_dim floats per layer.
const MixerSpec& toy_mixer_spec();

}  // namespace retnet::toy
