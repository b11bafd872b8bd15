// The block of the kernelised-attention mixers: the linear transformer (feature map elu+1,
// linear/linear_spec.cpp) and the Performer (FAVOR+ over the layer's stored random matrix,
// performer/performer_spec.cpp). No positions, no gate, no head norm:
//   out = normalised causal linear attention(phi(q), phi(k), v)
// with a constant-size state per head, [F, d_v + 1], for decoding.
#include <algorithm>

#include "../performer/performer_options.h"
#include "retnet/core/error.h"
#include "retnet/mixers/linear_attention.h"
#include "retnet/model/mixer_layer.h"
#include "shared_blocks.h"

namespace retnet::detail {
namespace {

// The Performer's own tensor, in its spec's order.
constexpr size_t kFeatureMatrix = 0;  // feature_matrix [m, d_k]: FAVOR+'s random projection

bool is_performer(const Config& c) { return c.mixer == &performer_mixer_spec(); }

FeatureMap layer_features(const Model& m, int64_t layer) {
  const Config& c = m.layer_config(layer);
  if (is_performer(c))
    return favor_feature_map(m.param(m.tensors().layers[layer].mixer_tensors[kFeatureMatrix]),
                             performer_features(c), c.key_dim());
  return elu_feature_map();
}

// The features F per head without a model at hand (sizes).
int64_t feature_count(const Config& c) {
  return is_performer(c) ? performer_features(c) : c.key_dim();
}
FeatureMap sizing_map(const Config& c) {
  FeatureMap f = elu_feature_map();
  if (is_performer(c)) {
    f.kind = FeatureMapKind::Favor;
    f.favor_m = performer_features(c);
  }
  return f;
}

// Saved: the output [N, vd], the features of q and of k [N, H, F] each, and each head's inverse
// denominators [N, H], in this order.
SavedSizes<4> saved_sizes(const Config& c, int64_t N) {
  const size_t features = static_cast<size_t>(N * c.heads * feature_count(c));
  return {static_cast<size_t>(N * c.value_embed_dim), features, features,
          static_cast<size_t>(N * c.heads)};
}
struct Saved {
  float *o, *phi_q, *phi_k, *inv_den;
};
Saved carve(const float* base, const Config& c, int64_t N) {
  const auto [o, phi_q, phi_k, inv_den] = carve_saved(base, saved_sizes(c, N));
  return {o, phi_q, phi_k, inv_den};
}

class LinearMixer final : public SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t chunk,
                          int64_t) const override {
    return linear_attention_workspace_floats(form, sizing_map(c), B, T, c.heads,
                                             c.key_dim(), c.head_value_dim(), chunk);
  }

  size_t backward_workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                   int64_t chunk) const override {
    return linear_attention_backward_workspace_floats(
        form, sizing_map(c), B, T, c.heads, c.key_dim(), c.head_value_dim(), chunk);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Config& c = p.model->layer_config(p.layer);
    const int64_t B = p.B, T = p.T;
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, B * T);
    float* o = p.saved ? sv.o : p.out;
    const HeadQkv x = head_qkv(p.proj, B, T, c);
    LinearAttentionArgs a;
    a.q = x.q, a.k = x.k, a.v = x.v;
    a.out = head_output_view(o, B, T, c);
    a.features = layer_features(*p.model, p.layer);
    a.state = p.state, a.state_stride = p.state_stride, a.rows = p.rows;
    a.chunk = p.chunk;
    if (p.saved) {
      a.saved_phi_q = sv.phi_q, a.saved_phi_k = sv.phi_k;
      a.saved_inv_denominators = sv.inv_den;
    }
    if (p.link)
      a.enter_slice = [&] { enter_slice_from_state(p, kernel_attention_state_floats(c), arena); };
    linear_attention_forward(p.form, a, arena);
    return o;
  }

  const float* output(const MixerGrad& gr, float*) const override {
    return carve(gr.saved, gr.model->layer_config(gr.layer), gr.B * gr.T).o;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Config& c = gr.model->layer_config(gr.layer);
    const int64_t B = gr.B, T = gr.T;
    const Saved sv = carve(gr.saved, c, B * T);
    zero_projection_grad(gr, c.projection_width());
    const HeadQkv x = head_qkv(gr.proj, B, T, c), dx = head_qkv(gr.d_proj, B, T, c);
    LinearAttentionGradArgs ga;
    ga.q = x.q, ga.k = x.k, ga.v = x.v;
    ga.d_q = dx.q, ga.d_k = dx.k, ga.d_v = dx.v;
    ga.out = head_output_view(sv.o, B, T, c), ga.d_out = head_output_view(gr.d_out, B, T, c);
    ga.features = layer_features(*gr.model, gr.layer);
    ga.phi_q = sv.phi_q, ga.phi_k = sv.phi_k, ga.inv_denominators = sv.inv_den;
    ga.chunk = gr.chunk;
    if (gr.link) {
      // No decay: a state passes through a slice unchanged but for what the slice adds.
      const int64_t S = kernel_attention_state_floats(c);
      const size_t n = static_cast<size_t>(B * S);
      ga.start_state = gr.link->entered(gr.layer, n);
      ga.d_start_state = arena.alloc(n);
      ga.state_stride = S;
      float* ones = arena.alloc(n);
      std::fill(ones, ones + n, 1.f);
      // Called after this if statement ends: ones and n by value.
      ga.leave_slice = [&gr, &ga, ones, n] {
        gr.link->leave_gradient(gr.layer, ga.d_start_state, ones, n);
      };
    }
    linear_attention_backward(gr.form, ga, arena);
  }

  bool joins_slices() const override { return true; }
};

}  // namespace

// Per head an F x (d_v + 1) state: the sum of phi(k) v^T and of phi(k) (the normaliser).
int64_t kernel_attention_state_floats(const Config& c) {
  return c.heads * feature_count(c) * (c.head_value_dim() + 1);
}

// The feature maps of q and k, the scores and values over the causal half of the context (T, or
// the chunk), and the state's read and update where a form carries one.
double kernel_attention_core_flops(const Config& c, int64_t T, Form form, int64_t chunk) {
  const double HF = static_cast<double>(c.heads * feature_count(c));
  const double vd = static_cast<double>(c.value_embed_dim);
  const double features = is_performer(c) ? 4.0 * HF * static_cast<double>(c.key_dim()) : 0.0;
  const double state = 4.0 * HF * static_cast<double>(c.head_value_dim() + 1);
  switch (form) {
    case Form::Parallel:
      return features + 2.0 * (static_cast<double>(T) / 2.0) * (HF + vd);
    case Form::Chunkwise:
      return features + 2.0 * (static_cast<double>(std::min(chunk, T)) / 2.0) * (HF + vd) + state;
    case Form::Recurrent:
    case Form::Scan:
      return features + state;
  }
  return 0;
}

const LayerMixer& kernel_attention_block() { return block_instance<LinearMixer>(); }

}  // namespace retnet::detail
