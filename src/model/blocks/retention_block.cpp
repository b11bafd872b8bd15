// Retention as a block's mixer (torchscale's MultiScaleRetention):
//   out = swish(g) * headnorm(retention(rot(q), rot(k / sqrt(d_k)), v))
// and, through config options, flash-linear-attention's MultiScaleRetention: half-split rotation,
// no score normalisation, a head norm weight shared by the heads, no gate, q/k width != d.
// (Scaling k rather than q by d_k^-1/2 is the same function: every score is q . k.)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../mixer_layer.h"
#include "retnet/core/parallel.h"
#include "retnet/mixers/retention.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"

namespace retnet::detail {
namespace {

float key_scale(const Config& c) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.key_dim())));
}

// The saved activations: retention's output o and its row statistics, the head norm's rstd. The
// head norm's output is not saved: the backward recomputes it from o (one cheap pass, the same
// float operations, so the same values), which keeps N x value_dim floats per layer out of a
// training step's peak memory.
struct Saved {
  float *o, *stats, *rstd;
};
Saved carve(float* base, const Config& c, int64_t N) {
  SavedCarver s(base);
  Saved r;
  r.o = s.take(N * c.value_embed_dim);
  r.stats = s.take(N * c.heads * 2);
  r.rstd = s.take(N * c.heads);
  return r;
}

enum OwnTensor { kHeadNormWeight };

// The head norm's weight [d_v] (shared by the heads), or nullptr when the config has none.
const float* head_norm_weight(const Model& m, int64_t layer) {
  const size_t i = m.tensors().layers[layer].mixer_tensors[kHeadNormWeight];
  return i == kNoTensor ? nullptr : m.param(i);
}

// on = headnorm(o): RMSNorm over each head's d_v values (times the weight, if any).
void head_norm(const Model& m, int64_t layer, const float* o, float* on, float* rstd, int64_t N) {
  const Config& c = m.config();
  const int64_t dv = c.head_value_dim();
  rmsnorm_forward(o, dv, head_norm_weight(m, layer), on, dv, rstd, N * c.heads, dv,
                  static_cast<float>(c.layernorm_eps));
}

// The block's output from the head norm's: gated by swish(g), or as it is without a gate.
void gate_output(const Config& c, const float* proj, const float* on, float* out, int64_t N) {
  const int64_t vd = c.value_embed_dim;
  if (c.gated())
    gated_activation_forward(Activation::Swish, proj + 2 * c.qk_width() + vd,
                             c.projection_width(), on, vd, out, vd, N, vd);
  else if (out != on)
    std::memcpy(out, on, static_cast<size_t>(N * vd) * sizeof(float));
}

class RetentionMixer final : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    const size_t N = static_cast<size_t>(B * T), vd = c.value_embed_dim, H = c.heads;
    return Arena::footprint(N * vd) + Arena::footprint(N * H * 2) + Arena::footprint(N * H);
  }

  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t chunk,
                          int64_t scan_tile) const override {
    // o (inference) or the head norm's output (training, o being saved) in the arena.
    return Arena::footprint(static_cast<size_t>(B * T * c.value_embed_dim)) +
           retention_workspace_floats(form, B, T, c.heads, c.key_dim(), c.head_value_dim(), chunk,
                                      scan_tile);
  }

  size_t backward_workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                   int64_t chunk) const override {
    const size_t N = static_cast<size_t>(B * T);
    return 2 * Arena::footprint(N * c.value_embed_dim) +
           retention_backward_workspace_floats(form, T, c.key_dim(), c.head_value_dim(), chunk);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Model& model = *p.model;
    const Config& c = model.config();
    const int64_t B = p.B, T = p.T, N = B * T, d = c.qk_width(), vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    float* q = p.proj;
    float* k = p.proj + d;
    float* v = p.proj + 2 * d;
    const float s = key_scale(c);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      for (int64_t i = 0; i < d; ++i) k[n * P + i] *= s;
    });
    rotate_queries_keys(p, q, k, P, H, dk);

    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, N);
    float* o = p.saved ? sv.o : arena.alloc(static_cast<size_t>(N * vd));
    // Inference normalises o in place; training keeps o for the backward.
    float* on = p.saved ? arena.alloc(static_cast<size_t>(N * vd)) : o;
    RetentionArgs ra;
    ra.q = head_view(q, B, T, H, P, dk);
    ra.k = head_view(k, B, T, H, P, dk);
    ra.v = head_view(v, B, T, H, P, dv);
    ra.out = head_view(o, B, T, H, vd, dv);
    ra.gammas = model.gammas().data();
    ra.state = p.state;
    ra.state_stride = p.state_stride;
    ra.positions = p.positions;
    ra.chunk = p.chunk;
    ra.scan_tile = p.scan_tile;
    ra.row_stats = p.saved ? sv.stats : nullptr;
    ra.normalize_scores = c.normalize_scores;
    retention_forward(p.form, ra, arena);
    head_norm(model, p.layer, o, on, p.saved ? sv.rstd : nullptr, N);
    gate_output(c, p.proj, on, p.out, N);
    return p.out;
  }

  const float* output(const MixerGrad& gr, float* scratch) const override {
    const Config& c = gr.model->config();
    const int64_t N = gr.B * gr.T;
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    head_norm(*gr.model, gr.layer, sv.o, scratch, nullptr, N);
    gate_output(c, gr.proj, scratch, scratch, N);
    return scratch;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.config();
    const int64_t B = gr.B, T = gr.T, N = B * T, d = c.qk_width(), vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    float* don = arena.alloc(static_cast<size_t>(N * vd));
    float* d_o = arena.alloc(static_cast<size_t>(N * vd));
    if (c.gated()) {
      const float* gate = gr.proj + 2 * d + vd;
      float* on = d_o;  // the head norm's output, recomputed; d_o is only needed after the gate
      head_norm(model, gr.layer, sv.o, on, nullptr, N);
      gated_activation_backward(Activation::Swish, gate, P, on, vd, gr.d_out, vd,
                                gr.d_proj + 2 * d + vd, P, don, vd, N, vd);
    } else {
      std::memcpy(don, gr.d_out, static_cast<size_t>(N * vd) * sizeof(float));
    }
    std::memset(d_o, 0, static_cast<size_t>(N * vd) * sizeof(float));
    const size_t w_index = model.tensors().layers[gr.layer].mixer_tensors[kHeadNormWeight];
    rmsnorm_backward(sv.o, dv, head_norm_weight(model, gr.layer), sv.rstd, don, dv, d_o, dv,
                     w_index == kNoTensor ? nullptr : gr.grads->tensor(w_index), N * H, dv);
    for (int64_t n = 0; n < N; ++n)
      std::memset(gr.d_proj + n * P, 0, static_cast<size_t>(2 * d + vd) * sizeof(float));
    RetentionGradArgs ga;
    ga.q = head_view(gr.proj, B, T, H, P, dk);
    ga.k = head_view(gr.proj + d, B, T, H, P, dk);
    ga.v = head_view(gr.proj + 2 * d, B, T, H, P, dv);
    ga.out = head_view(sv.o, B, T, H, vd, dv);
    ga.d_out = head_view(d_o, B, T, H, vd, dv);
    ga.d_q = head_view(gr.d_proj, B, T, H, P, dk);
    ga.d_k = head_view(gr.d_proj + d, B, T, H, P, dk);
    ga.d_v = head_view(gr.d_proj + 2 * d, B, T, H, P, dv);
    ga.row_stats = sv.stats;
    ga.gammas = model.gammas().data();
    ga.chunk = gr.chunk;
    retention_backward(gr.form, ga, arena);
    rotate_back_query_key_grads(gr, gr.d_proj, gr.d_proj + d, P, H, dk);
    const float s = key_scale(c);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      for (int64_t i = 0; i < d; ++i) gr.d_proj[n * P + d + i] *= s;
    });
  }
};

std::vector<int64_t> head_norm_shape(const Config& c) { return {c.head_value_dim()}; }
void ones_init(const Config&, int64_t, uint64_t, float* w, int64_t n) { std::fill(w, w + n, 1.f); }
bool has_head_norm_weight(const Config& c) { return c.head_norm_weight; }

// Per head a d_k x (d_v + 1) state: the decayed sum of k v^T and of k (for the normalisation).
int64_t retention_state_floats(const Config& c) {
  return c.heads * c.key_dim() * (c.head_value_dim() + 1);
}

// Scores and values over the causal half of the context (T, or the chunk in the chunkwise form),
// plus the state's read and update where a form carries one.
double retention_core_flops(const Config& c, int64_t T, Form form, int64_t chunk) {
  const double d = static_cast<double>(c.qk_width()), vd = static_cast<double>(c.value_embed_dim);
  const double state = 4.0 * d * static_cast<double>(c.head_value_dim() + 1);
  switch (form) {
    case Form::Parallel:
      return 2.0 * (static_cast<double>(T) / 2.0) * (d + vd);
    case Form::Chunkwise:
      return 2.0 * (static_cast<double>(std::min(chunk, T)) / 2.0) * (d + vd) + state;
    case Form::Recurrent:
    case Form::Scan:
      return state;
  }
  return 0;
}

}  // namespace

const MixerSpec& retention_mixer_spec() {
  static const MixerSpec spec{
      .name = "retention", .scope = "retention",  // torchscale's names
      .summary = "multi-scale retention, head norm, swish gate (torchscale's RetNet)",
      .gated = true, .rotates = true, .decays_by_head = true, .forms = {true, true, true, true},
      .tensors = {{"head_norm.weight", head_norm_shape, ones_init, false, has_head_norm_weight}},
      .state_floats_per_layer = retention_state_floats,
      .core_flops_per_token = retention_core_flops, .block = block_instance<RetentionMixer>};
  return spec;
}

}  // namespace retnet::detail
