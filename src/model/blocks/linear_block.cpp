// The kernelised-attention mixers: the linear transformer (feature map elu+1) and the Performer
// (FAVOR+ over the layer's stored random matrix). No positions, no gate, no head norm:
//   out = normalised causal linear attention(phi(q), phi(k), v)
// with a constant-size state per head, [F, d_v + 1], for decoding.
#include <cstring>

#include "../mixer_layer.h"
#include "retnet/core/error.h"
#include "retnet/mixers/linear_attention.h"

namespace retnet::detail {
namespace {

FeatureMap layer_features(const Model& m, int64_t layer) {
  const Config& c = m.config();
  if (c.mixer == MixerKind::Performer)
    return favor_feature_map(m.param(m.tensors().layers[layer].extra[0]), c.performer_features,
                             c.key_dim());
  return elu_feature_map();
}

// The features F per head without a model at hand (sizes).
int64_t feature_count(const Config& c) {
  return c.mixer == MixerKind::Performer ? c.performer_features : c.key_dim();
}
FeatureMap sizing_map(const Config& c) {
  FeatureMap f = elu_feature_map();
  if (c.mixer == MixerKind::Performer) {
    f.kind = FeatureMapKind::Favor;
    f.favor_m = c.performer_features;
  }
  return f;
}

struct Saved {
  float *o, *phi_q, *phi_k, *inv_den;
};
Saved carve(float* base, const Config& c, int64_t N) {
  SavedCarver s(base);
  Saved r;
  const int64_t HF = c.heads * feature_count(c);
  r.o = s.take(N * c.value_embed_dim);
  r.phi_q = s.take(N * HF);
  r.phi_k = s.take(N * HF);
  r.inv_den = s.take(N * c.heads);
  return r;
}

class LinearMixer final : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    const size_t N = static_cast<size_t>(B * T), HF = c.heads * feature_count(c);
    return Arena::footprint(N * c.value_embed_dim) + 2 * Arena::footprint(N * HF) +
           Arena::footprint(N * c.heads);
  }

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
    const Config& c = p.model->config();
    const int64_t B = p.B, T = p.T, N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, N);
    float* o = p.saved ? sv.o : p.out;
    LinearAttentionArgs a;
    a.q = head_view(p.proj, B, T, H, P, dk);
    a.k = head_view(p.proj + d, B, T, H, P, dk);
    a.v = head_view(p.proj + 2 * d, B, T, H, P, dv);
    a.out = head_view(o, B, T, H, vd, dv);
    a.features = layer_features(*p.model, p.layer);
    a.state = p.state;
    a.state_stride = p.state_stride;
    a.chunk = p.chunk;
    if (p.saved) {
      a.saved_phi_q = sv.phi_q;
      a.saved_phi_k = sv.phi_k;
      a.saved_inv_denominators = sv.inv_den;
    }
    linear_attention_forward(p.form, a, arena);
    return o;
  }

  const float* output(const MixerGrad& gr, float*) const override {
    return carve(const_cast<float*>(gr.saved), gr.model->config(), gr.B * gr.T).o;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Config& c = gr.model->config();
    const int64_t B = gr.B, T = gr.T, N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    std::memset(gr.d_proj, 0, static_cast<size_t>(N * P) * sizeof(float));
    LinearAttentionGradArgs ga;
    ga.q = head_view(gr.proj, B, T, H, P, dk);
    ga.k = head_view(gr.proj + d, B, T, H, P, dk);
    ga.v = head_view(gr.proj + 2 * d, B, T, H, P, dv);
    ga.out = head_view(sv.o, B, T, H, vd, dv);
    ga.d_out = head_view(gr.d_out, B, T, H, vd, dv);
    ga.d_q = head_view(gr.d_proj, B, T, H, P, dk);
    ga.d_k = head_view(gr.d_proj + d, B, T, H, P, dk);
    ga.d_v = head_view(gr.d_proj + 2 * d, B, T, H, P, dv);
    ga.features = layer_features(*gr.model, gr.layer);
    ga.phi_q = sv.phi_q;
    ga.phi_k = sv.phi_k;
    ga.inv_denominators = sv.inv_den;
    ga.chunk = gr.chunk;
    linear_attention_backward(gr.form, ga, arena);
  }
};

}  // namespace

const LayerMixer& linear_layer_mixer() {
  static const LinearMixer mixer;
  return mixer;
}

}  // namespace retnet::detail
