// Retention as a block's mixer (torchscale's MultiScaleRetention):
//   out = swish(g) * headnorm(retention(rot(q), rot(k / sqrt(d_k)), v))
// and, through config options, flash-linear-attention's MultiScaleRetention: half-split rotation,
// no score normalisation, a head norm weight shared by the heads, no gate, q/k width != d, keys
// and values shared by groups of heads (kv_heads), a feature map of q and k.
// (Scaling k rather than q by d_k^-1/2 is the same function: every score is q . k.)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../shared/retention_heads.h"
#include "retnet/core/parallel.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/hf_layout.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"

namespace retnet::detail {
namespace {

float key_scale(const Config& c) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.key_dim())));
}

// Where q, k, v and g start in a projection row [P]: q [qk_width], k and v of the kv heads
// (qk_width / groups, value_embed_dim / groups; the full widths without kv_heads), g [vd].
struct Columns {
  int64_t d, dkv, vkv, P;
  explicit Columns(const Config& c)
      : d(c.qk_width()), dkv(c.k_width()), vkv(c.v_width()), P(c.projection_width()) {}
  int64_t k() const { return d; }
  int64_t v() const { return d + dkv; }
  int64_t g() const { return d + dkv + vkv; }
};

// The saved activations: retention's output o and its row statistics, the head norm's rstd, and
// with a feature map the q and k before it ([N, qk_width + k_width]). The head norm's output is not
// saved: the backward recomputes it from o (one cheap pass, the same float operations, so the same
// values), which keeps N x value_dim floats per layer out of a training step's peak memory.
struct Saved {
  float *o, *stats, *rstd, *pre = nullptr;
};
size_t pre_feature_floats(const Config& c, int64_t N) {
  if (c.feature_map == QkFeatureMap::None) return 0;
  return static_cast<size_t>(N * (c.qk_width() + c.k_width()));
}
Saved carve(float* base, const Config& c, int64_t N) {
  SavedCarver s(base);
  Saved r;
  r.o = s.take(N * c.value_embed_dim);
  r.stats = s.take(N * c.heads * 2);
  r.rstd = s.take(N * c.heads);
  if (c.feature_map != QkFeatureMap::None) r.pre = s.take(pre_feature_floats(c, N));
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
  const Config& c = m.layer_config(layer);
  const int64_t dv = c.head_value_dim();
  rmsnorm_forward(o, dv, head_norm_weight(m, layer), on, dv, rstd, N * c.heads, dv,
                  static_cast<float>(c.layernorm_eps));
}

// The block's output from the head norm's: gated by swish(g), or as it is without a gate.
void gate_output(const Config& c, const float* proj, const float* on, float* out, int64_t N) {
  const int64_t vd = c.value_embed_dim;
  if (c.gated())
    gated_activation_forward(Activation::Swish, proj + Columns(c).g(), c.projection_width(), on,
                             vd, out, vd, N, vd);
  else if (out != on)
    std::memcpy(out, on, static_cast<size_t>(N * vd) * sizeof(float));
}

// Extra arena floats of grouped keys and values: the full-head k and v (forward), and their
// gradients too (backward); 0 without kv_heads.
size_t grouped_kv_floats(const Config& c, int64_t N) {
  if (c.kv_groups() == 1) return 0;
  return Arena::footprint(static_cast<size_t>(N * c.qk_width())) +
         Arena::footprint(static_cast<size_t>(N * c.value_embed_dim));
}

// k and v as retention reads them, [N, H, dk] and [N, H, dv] rows ldk and ldv floats apart: the
// projection's own columns, or (kv_heads) copies of every kv head for its query heads.
struct FullKv {
  float *k, *v;
  int64_t ldk, ldv;
};
FullKv full_kv(const Config& c, const float* proj, int64_t N, Arena& arena) {
  const Columns col(c);
  const int64_t G = c.kv_groups(), Hkv = c.kv_head_count();
  if (G == 1)
    return {const_cast<float*>(proj) + col.k(), const_cast<float*>(proj) + col.v(), col.P, col.P};
  FullKv r{arena.alloc(static_cast<size_t>(N * col.d)),
           arena.alloc(static_cast<size_t>(N * c.value_embed_dim)), col.d, c.value_embed_dim};
  expand_kv_heads(proj + col.k(), col.P, r.k, N, Hkv, G, c.key_dim());
  expand_kv_heads(proj + col.v(), col.P, r.v, N, Hkv, G, c.head_value_dim());
  return r;
}

// The feature map, the key scale and the rotation of q and k in the projection rows, in fla's
// order (map, then rotate); with a feature map the values before it go to `pre` (training).
void transform_queries_keys(const MixerPass& p, float* pre) {
  const Config& c = p.model->layer_config(p.layer);
  const Columns col(c);
  const int64_t N = p.B * p.T, qk = col.d + col.dkv;
  if (c.feature_map != QkFeatureMap::None) {
    if (pre)
      for (int64_t n = 0; n < N; ++n)
        std::memcpy(pre + n * qk, p.proj + n * col.P, static_cast<size_t>(qk) * sizeof(float));
    apply_qk_feature_map(c.feature_map, p.proj, col.P, N, qk);
  }
  float* k = p.proj + col.k();
  const float s = key_scale(c);
  parallel_for_if(N * col.dkv > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < col.dkv; ++i) k[n * col.P + i] *= s;
  });
  rotate_queries_keys(p, p.proj, k, col.P, c.heads, c.key_dim(), c.kv_head_count());
}

int64_t retention_state_floats(const Config& c);

// Sequence parallel: this slice's summary through the link, whose answer (the state the earlier
// slices leave) becomes the state the chunkwise form starts from.
void enter_slice(const MixerPass& p, const RetentionArgs& ra, Arena& arena) {
  const Config& c = p.model->layer_config(p.layer);
  RETNET_CHECK(p.form == Form::Chunkwise && p.state,
               "sequence parallel retention runs the chunkwise form with a state");
  const int64_t S = retention_state_floats(c);
  const size_t n = static_cast<size_t>(p.B * S);
  float* summary = arena.alloc(n);
  float* decay = arena.alloc(n);
  retention_slice_summary(ra.k, ra.v, ra.gammas, summary, decay, S);
  p.link->enter(p.layer, summary, decay, n);
  for (int64_t b = 0; b < p.B; ++b)
    std::memcpy(p.state + b * p.state_stride, summary + b * S,
                static_cast<size_t>(S) * sizeof(float));
}

class RetentionMixer final : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    const size_t N = static_cast<size_t>(B * T), vd = c.value_embed_dim, H = c.heads;
    return Arena::footprint(N * vd) + Arena::footprint(N * H * 2) + Arena::footprint(N * H) +
           Arena::footprint(pre_feature_floats(c, B * T));
  }

  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t chunk,
                          int64_t scan_tile) const override {
    // o (inference) or the head norm's output (training, o being saved) in the arena.
    return Arena::footprint(static_cast<size_t>(B * T * c.value_embed_dim)) +
           grouped_kv_floats(c, B * T) +
           retention_workspace_floats(form, B, T, c.heads, c.key_dim(), c.head_value_dim(), chunk,
                                      scan_tile);
  }

  size_t backward_workspace_floats(const Config& c, Form form, int64_t B, int64_t T,
                                   int64_t chunk) const override {
    const size_t N = static_cast<size_t>(B * T);
    return 2 * Arena::footprint(N * c.value_embed_dim) + 2 * grouped_kv_floats(c, B * T) +
           retention_backward_workspace_floats(form, T, c.key_dim(), c.head_value_dim(), chunk);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Model& model = *p.model;
    const Config& c = model.layer_config(p.layer);
    const int64_t B = p.B, T = p.T, N = B * T, vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, N);
    transform_queries_keys(p, sv.pre);
    const FullKv kv = full_kv(c, p.proj, N, arena);

    float* o = p.saved ? sv.o : arena.alloc(static_cast<size_t>(N * vd));
    // Inference normalises o in place; training keeps o for the backward.
    float* on = p.saved ? arena.alloc(static_cast<size_t>(N * vd)) : o;
    RetentionArgs ra;
    ra.q = head_view(p.proj, B, T, H, P, dk);
    ra.k = head_view(kv.k, B, T, H, kv.ldk, dk);
    ra.v = head_view(kv.v, B, T, H, kv.ldv, dv);
    ra.out = head_view(o, B, T, H, vd, dv);
    ra.gammas = model.gammas().data();
    ra.state = p.state, ra.state_stride = p.state_stride, ra.rows = p.rows;
    ra.positions = p.positions;
    ra.chunk = p.chunk;
    ra.scan_tile = p.scan_tile;
    ra.row_stats = p.saved ? sv.stats : nullptr;
    ra.normalize_scores = c.normalize_scores;
    if (p.link) enter_slice(p, ra, arena);
    retention_forward(p.form, ra, arena);
    head_norm(model, p.layer, o, on, p.saved ? sv.rstd : nullptr, N);
    gate_output(c, p.proj, on, p.out, N);
    return p.out;
  }

  const float* output(const MixerGrad& gr, float* scratch) const override {
    const Config& c = gr.model->layer_config(gr.layer);
    const int64_t N = gr.B * gr.T;
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    head_norm(*gr.model, gr.layer, sv.o, scratch, nullptr, N);
    gate_output(c, gr.proj, scratch, scratch, N);
    return scratch;
  }

  bool joins_slices() const override { return true; }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.layer_config(gr.layer);
    const Columns col(c);
    const int64_t B = gr.B, T = gr.T, N = B * T, vd = c.value_embed_dim, P = col.P;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    float* don = arena.alloc(static_cast<size_t>(N * vd));
    float* d_o = arena.alloc(static_cast<size_t>(N * vd));
    if (c.gated()) {
      float* on = d_o;  // the head norm's output, recomputed; d_o is only needed after the gate
      head_norm(model, gr.layer, sv.o, on, nullptr, N);
      gated_activation_backward(Activation::Swish, gr.proj + col.g(), P, on, vd, gr.d_out, vd,
                                gr.d_proj + col.g(), P, don, vd, N, vd);
    } else {
      std::memcpy(don, gr.d_out, static_cast<size_t>(N * vd) * sizeof(float));
    }
    std::memset(d_o, 0, static_cast<size_t>(N * vd) * sizeof(float));
    const size_t w_index = model.tensors().layers[gr.layer].mixer_tensors[kHeadNormWeight];
    rmsnorm_backward(sv.o, dv, head_norm_weight(model, gr.layer), sv.rstd, don, dv, d_o, dv,
                     w_index == kNoTensor ? nullptr : gr.grads->tensor(w_index), N * H, dv);
    for (int64_t n = 0; n < N; ++n)
      std::memset(gr.d_proj + n * P, 0, static_cast<size_t>(col.g()) * sizeof(float));
    const FullKv kv = full_kv(c, gr.proj, N, arena);
    // The full-head gradients of k and v: the projection's own columns, or buffers summed into
    // each kv head's columns below.
    FullKv dkv{gr.d_proj + col.k(), gr.d_proj + col.v(), P, P};
    if (c.kv_groups() > 1) {
      dkv = {arena.alloc(static_cast<size_t>(N * col.d)), arena.alloc(static_cast<size_t>(N * vd)),
             col.d, vd};
      std::memset(dkv.k, 0, static_cast<size_t>(N * col.d) * sizeof(float));
      std::memset(dkv.v, 0, static_cast<size_t>(N * vd) * sizeof(float));
    }
    RetentionGradArgs ga;
    ga.q = head_view(gr.proj, B, T, H, P, dk);
    ga.k = head_view(kv.k, B, T, H, kv.ldk, dk);
    ga.v = head_view(kv.v, B, T, H, kv.ldv, dv);
    ga.out = head_view(sv.o, B, T, H, vd, dv);
    ga.d_out = head_view(d_o, B, T, H, vd, dv);
    ga.d_q = head_view(gr.d_proj, B, T, H, P, dk);
    ga.d_k = head_view(dkv.k, B, T, H, dkv.ldk, dk);
    ga.d_v = head_view(dkv.v, B, T, H, dkv.ldv, dv);
    ga.row_stats = sv.stats;
    ga.gammas = model.gammas().data();
    ga.chunk = gr.chunk;
    float* d_start = nullptr;
    const int64_t S = retention_state_floats(c);
    if (gr.link) {
      ga.start_state = gr.link->entered(gr.layer, static_cast<size_t>(B * S));
      ga.d_start_state = d_start = arena.alloc(static_cast<size_t>(B * S));
      ga.state_stride = S;
    }
    retention_backward(gr.form, ga, arena);
    if (gr.link) {
      // The later slices' gradient of the state this slice leaves, into this slice's k and v.
      float* decay = arena.alloc(static_cast<size_t>(B * S));
      retention_slice_decay(ga.gammas, B, T, H, dk, dv, decay, S);
      gr.link->leave_gradient(gr.layer, d_start, decay, static_cast<size_t>(B * S));
      retention_slice_summary_backward(ga.k, ga.v, ga.gammas, d_start, S, ga.d_k, ga.d_v);
    }
    const int64_t Hkv = c.kv_head_count(), G = c.kv_groups();
    if (G > 1) {
      reduce_kv_heads(dkv.k, gr.d_proj + col.k(), P, N, Hkv, G, dk);
      reduce_kv_heads(dkv.v, gr.d_proj + col.v(), P, N, Hkv, G, dv);
    }
    rotate_back_query_key_grads(gr, gr.d_proj, gr.d_proj + col.k(), P, H, dk, Hkv);
    const float s = key_scale(c);
    parallel_for_if(N * col.dkv > 65536, N, [&](int64_t n) {
      for (int64_t i = 0; i < col.dkv; ++i) gr.d_proj[n * P + col.k() + i] *= s;
    });
    qk_feature_map_backward(c.feature_map, sv.pre, gr.d_proj, P, N, col.d + col.dkv);
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
      .core_flops_per_token = retention_core_flops, .block = block_instance<RetentionMixer>,
      .hf = &retention_hf_layout()};
  return spec;
}

}  // namespace retnet::detail
