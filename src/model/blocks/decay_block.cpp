// The channel-wise decay-attention mixers, one kernel (mixers/decay_attention.h):
//   rwkv:       out = sigmoid(r) * wkv(k, v; w = exp(time_decay), u = time_first)
//   aft-simple: out = sigmoid(q) * running average of v weighted by exp(k)   (w = u = 0)
// Projections r (or q) | k | v, each of width vd; a constant-size state of 3 x vd per layer.
#include <cmath>
#include <cstring>

#include "../mixer_layer.h"
#include "retnet/core/error.h"
#include "retnet/mixers/decay_attention.h"

namespace retnet::detail {
namespace {

// w and u of a layer into `wu` [2, vd]: rwkv's decay rate exp(time_decay) and bonus; zeros for
// aft-simple.
void decay_parameters(const Model& m, int64_t layer, float* wu) {
  const Config& c = m.config();
  const int64_t vd = c.value_embed_dim;
  if (c.mixer != MixerKind::Rwkv) {
    std::memset(wu, 0, static_cast<size_t>(2 * vd) * sizeof(float));
    return;
  }
  const LayerTensors& L = m.tensors().layers[layer];
  const float* decay = m.param(L.extra[0]);
  const float* first = m.param(L.extra[1]);
  for (int64_t i = 0; i < vd; ++i) {
    wu[i] = std::exp(decay[i]);
    wu[vd + i] = first[i];
  }
}

struct Saved {
  float *wkv, *log_den;
};
Saved carve(float* base, const Config& c, int64_t N) {
  SavedCarver s(base);
  Saved r;
  r.wkv = s.take(N * c.value_embed_dim);
  r.log_den = s.take(N * c.value_embed_dim);
  return r;
}

class DecayMixer final : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    return 2 * Arena::footprint(static_cast<size_t>(B * T * c.value_embed_dim));
  }

  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t chunk,
                          int64_t) const override {
    return Arena::footprint(static_cast<size_t>(2 * c.value_embed_dim)) +
           decay_attention_workspace_floats(form, B, T, c.value_embed_dim, chunk);
  }

  size_t backward_workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                   int64_t chunk) const override {
    return 2 * Arena::footprint(static_cast<size_t>(2 * c.value_embed_dim)) +
           decay_attention_backward_workspace_floats(form, B, T, c.value_embed_dim,
                                                     chunk);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Config& c = p.model->config();
    const int64_t B = p.B, T = p.T, N = B * T, vd = c.value_embed_dim, P = 3 * vd;
    float* wu = arena.alloc(static_cast<size_t>(2 * vd));
    decay_parameters(*p.model, p.layer, wu);
    DecayAttentionArgs a;
    a.r = channel_view(p.proj, B, T, P, vd);
    a.k = channel_view(p.proj + vd, B, T, P, vd);
    a.v = channel_view(p.proj + 2 * vd, B, T, P, vd);
    a.out = channel_view(p.out, B, T, vd, vd);
    a.w = wu;
    a.u = wu + vd;
    a.state = p.state;
    a.state_stride = p.state_stride;
    a.chunk = p.chunk;
    if (p.saved) {
      const Saved sv = carve(p.saved, c, N);
      a.saved_wkv = sv.wkv;
      a.saved_log_denominators = sv.log_den;
    }
    decay_attention_forward(p.form, a, arena);
    return p.out;
  }

  const float* output(const MixerGrad& gr, float* scratch) const override {
    const Config& c = gr.model->config();
    const int64_t N = gr.B * gr.T, vd = c.value_embed_dim, P = 3 * vd;
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    sigmoid_gated(gr.proj, P, sv.wkv, scratch, N, vd);
    return scratch;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.config();
    const int64_t B = gr.B, T = gr.T, N = B * T, vd = c.value_embed_dim, P = 3 * vd;
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    float* wu = arena.alloc(static_cast<size_t>(2 * vd));
    float* dwu = arena.alloc(static_cast<size_t>(2 * vd));
    decay_parameters(model, gr.layer, wu);
    std::memset(dwu, 0, static_cast<size_t>(2 * vd) * sizeof(float));
    std::memset(gr.d_proj, 0, static_cast<size_t>(N * P) * sizeof(float));
    DecayAttentionGradArgs ga;
    ga.r = channel_view(gr.proj, B, T, P, vd);
    ga.k = channel_view(gr.proj + vd, B, T, P, vd);
    ga.v = channel_view(gr.proj + 2 * vd, B, T, P, vd);
    ga.d_out = channel_view(gr.d_out, B, T, vd, vd);
    ga.d_r = channel_view(gr.d_proj, B, T, P, vd);
    ga.d_k = channel_view(gr.d_proj + vd, B, T, P, vd);
    ga.d_v = channel_view(gr.d_proj + 2 * vd, B, T, P, vd);
    ga.w = wu;
    ga.u = wu + vd;
    ga.d_w = dwu;
    ga.d_u = dwu + vd;
    ga.wkv = sv.wkv;
    ga.log_denominators = sv.log_den;
    ga.chunk = gr.chunk;
    decay_attention_backward(gr.form, ga, arena);
    if (c.mixer == MixerKind::Rwkv && gr.grads) {
      const LayerTensors& L = model.tensors().layers[gr.layer];
      float* g_decay = gr.grads->tensor(L.extra[0]);
      float* g_first = gr.grads->tensor(L.extra[1]);
      for (int64_t i = 0; i < vd; ++i) {
        g_decay[i] += dwu[i] * wu[i];  // w = exp(time_decay)
        g_first[i] += dwu[vd + i];
      }
    }
  }
};

}  // namespace

const LayerMixer& decay_layer_mixer() {
  static const DecayMixer mixer;
  return mixer;
}

}  // namespace retnet::detail
