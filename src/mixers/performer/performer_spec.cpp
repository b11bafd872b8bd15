// The Performer's spec: normalised causal linear attention over FAVOR+ features of the layer's
// stored random matrix (the block it shares with the linear transformer:
// shared/kernel_attention_block.cpp).
#include <algorithm>
#include <vector>

#include "../shared/shared_blocks.h"
#include "performer_options.h"
#include "retnet/mixers/linear_attention.h"

namespace retnet::detail {
namespace {

std::vector<int64_t> feature_matrix_shape(const Config& c) {
  return {performer_features(c), c.key_dim()};
}
// Each layer its own random matrix, a pure function of (seed, layer): stored in the model file,
// so every form and every later run uses the same one.
void feature_matrix_init(const Config& c, int64_t layer, uint64_t seed, float* w, int64_t) {
  const uint64_t matrix_seed = seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(layer + 1));
  const std::vector<float> m = favor_random_matrix(matrix_seed, performer_features(c), c.key_dim());
  std::copy(m.begin(), m.end(), w);
}

}  // namespace

const MixerSpec& performer_mixer_spec() {
  // The feature matrix is drawn at init, never trained.
  static const MixerSpec spec{
      .name = "performer",
      .scope = "performer",
      .summary = "Performer: FAVOR+ positive orthogonal random features",
      .forms = {true, true, true, false},
      .tensors = {{"feature_matrix", feature_matrix_shape, feature_matrix_init}},
      .options = &performer_options_codec(),
      .state_floats_per_layer = kernel_attention_state_floats,
      .core_flops_per_token = kernel_attention_core_flops,
      .block = kernel_attention_block};
  return spec;
}

}  // namespace retnet::detail
