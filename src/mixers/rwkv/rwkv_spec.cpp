// RWKV's spec: the decay attention block (shared/decay_block.cpp) with its own per-channel decay
// rates and current-token bonus, and their initialisation.
#include <cmath>
#include <vector>

#include "../shared/shared_blocks.h"

namespace retnet::detail {
namespace {

std::vector<int64_t> channel_shape(const Config& c) { return {c.value_embed_dim}; }
// RWKV-4's initialisation: decay rates exp(time_decay) spread from exp(-5) (long memory) to
// exp(3) (the last token only) across channels, faster in deeper layers.
void time_decay_init(const Config& c, int64_t layer, uint64_t, float* w, int64_t n) {
  const double ratio = c.layers > 1 ? static_cast<double>(layer) / (c.layers - 1) : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = n > 1 ? static_cast<double>(i) / (n - 1) : 0.0;
    w[i] = static_cast<float>(-5.0 + 8.0 * std::pow(x, 0.7 + 1.3 * ratio));
  }
}
// The current token's bonus around log(0.3), with a zigzag across channels.
void time_first_init(const Config&, int64_t, uint64_t, float* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    w[i] = static_cast<float>(std::log(0.3) + 0.5 * ((i + 1) % 3 - 1));
}

}  // namespace

const MixerSpec& rwkv_mixer_spec() {
  static const MixerSpec spec{
      .name = "rwkv", .scope = "rwkv",
      .summary = "RWKV-style decay attention: per-channel decay, bonus for the current token",
      .per_channel = true, .forms = {true, true, true, false}, .preferred_chunk = 16,
      .tensors = {{"time_decay", channel_shape, time_decay_init},
                  {"time_first", channel_shape, time_first_init}},
      .state_floats_per_layer = decay_state_floats,
      .core_flops_per_token = decay_core_flops, .block = decay_block};
  return spec;
}

}  // namespace retnet::detail
