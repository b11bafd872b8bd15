// The reference backend's kernelised attention (the linear transformer's elu + 1 features and the
// Performer's FAVOR+ over the layer's stored matrix; the block of
// src/mixers/shared/kernel_attention_block.cpp): per head linear_attention_reference's recurrence
// from the head's state [F, d_v + 1], which it leaves holding the state after the pass.
#include "../../mixers/performer/performer_options.h"
#include "reference_mixers.h"
#include "retnet/mixers/linear_attention.h"

namespace retnet::detail::reference {
namespace {

// The layer's feature map: FAVOR+ over its own tensor (and that matrix's key shift, a constant of
// the matrix that the states are scaled by), or elu + 1.
FeatureMap layer_features(const Model& m, int64_t layer) {
  const Config& c = m.layer_config(layer);
  if (c.mixer != &performer_mixer_spec()) return elu_feature_map();
  const size_t matrix = m.tensors().layers[layer].mixer_tensors[0];
  return favor_feature_map(m.param(matrix), performer_features(c), c.key_dim());
}

}  // namespace

const float* kernel_attention_forward(const MixerPass& p) {
  const Config& c = p.model->layer_config(p.layer);
  const int64_t B = p.B, T = p.T, H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
  const FeatureMap features = layer_features(*p.model, p.layer);
  const int64_t F = features.features(dk),
                head_state = linear_attention_state_floats_per_head(F, dv);
  const HeadQkv x = head_qkv(p.proj, B, T, c);
  const TensorView out = head_output_view(p.out, B, T, c);
  std::vector<float> q(T * dk), k(T * dk), v(T * dv);
  std::vector<double> o(T * dv), start(head_state), end(head_state);
  for (int64_t b = 0; b < B; ++b) {
    float* saved_state = sequence_state(p, b);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < dk; ++i) {
          q[t * dk + i] = x.q.at(b, t, h, i);
          k[t * dk + i] = x.k.at(b, t, h, i);
        }
        for (int64_t i = 0; i < dv; ++i) v[t * dv + i] = x.v.at(b, t, h, i);
      }
      float* head = saved_state ? saved_state + h * head_state : nullptr;
      for (int64_t i = 0; i < head_state; ++i) start[i] = head ? head[i] : 0.0;
      linear_attention_reference(features, q.data(), k.data(), v.data(), o.data(), T, dk, dv,
                                 start.data(), end.data());
      if (head)
        for (int64_t i = 0; i < head_state; ++i) head[i] = static_cast<float>(end[i]);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < dv; ++i) out.at(b, t, h, i) = static_cast<float>(o[t * dv + i]);
    }
  }
  return p.out;
}

}  // namespace retnet::detail::reference
