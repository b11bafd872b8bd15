// Softmax attention as a block's mixer: the transformer baseline, and the attention layers of
// hybrid models (fla's "attn"). Rotary positions on q and k (the model's rotation style, with the
// attention options' base), scores scaled by 1 / sqrt(d_k), no gate, no head norm, optional q, k,
// v biases, kv heads shared by groups of query heads and a sliding window (the config's
// AttentionOptions, attention_options.h; the cache keeps every token, the window limits what a
// query reads):
//   out = attention(rot(q + b_q), rot(k + b_k), v + b_v)
// Training runs the tiled online-softmax kernel (both forms); the chunkwise form with a state
// runs it per chunk against the cache; decoding keeps every key and value in the
// state's token cache (rows of [kv heads, d_k] keys then [kv heads, d_v] values, the kernel's
// layout: a kv head is cached once for its whole group of query heads).
#include <algorithm>

#include "../shared/retention_heads.h"
#include "attention_options.h"
#include "retnet/core/parallel.h"
#include "retnet/mixers/attention.h"
#include "retnet/model/hf_layout.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::detail {
namespace {

// Saved: the output [N, vd] and each head's log-sum-exp of its scores [N, H], in this order.
SavedSizes<2> saved_sizes(const Config& c, int64_t N) {
  return {static_cast<size_t>(N * c.value_embed_dim), static_cast<size_t>(N * c.heads)};
}
struct Saved {
  float *o, *lse;
};
Saved carve(const float* base, const Config& c, int64_t N) {
  const auto [o, lse] = carve_saved(base, saved_sizes(c, N));
  return {o, lse};
}

// The attention options' own tensors, in its spec's order: q, k and v biases (qkv_bias).
constexpr size_t kQueryBias = 0, kKeyBias = 1, kValueBias = 2;

// Column offsets and widths of q | k | v in a layer's projection rows.
struct QkvColumns {
  int64_t P, q, k, v;  // row width; widths of q, k (kv heads) and v (kv heads)
  explicit QkvColumns(const Config& c)
      : P(c.projection_width()), q(c.qk_width()), k(c.k_width()), v(c.v_width()) {}
};

// Extra arena floats of grouped keys and values: all heads' k and v; 0 without kv_heads.
size_t grouped_kv_floats(const Config& c, int64_t N) {
  if (c.kv_groups() == 1) return 0;
  return Arena::footprint(static_cast<size_t>(N * c.qk_width())) +
         Arena::footprint(static_cast<size_t>(N * c.value_embed_dim));
}

// k and v as the kernels read them, [B, T, H, d]: the projection's own columns, or (kv_heads)
// each kv head repeated for its group of query heads, in the arena.
struct HeadKv {
  TensorView k, v;
  float *k_data = nullptr, *v_data = nullptr;  // the arena copies, if any
};
HeadKv head_kv(const Config& c, const float* proj, int64_t B, int64_t T, Arena& arena) {
  const QkvColumns col(c);
  const int64_t N = B * T, H = c.heads, G = c.kv_groups(), Hkv = c.kv_head_count();
  const int64_t dk = c.key_dim(), dv = c.head_value_dim();
  if (G == 1)
    return {head_view(proj + col.q, B, T, H, col.P, dk),
            head_view(proj + col.q + col.k, B, T, H, col.P, dv)};
  HeadKv r;
  r.k_data = arena.alloc(static_cast<size_t>(N * H * dk));
  r.v_data = arena.alloc(static_cast<size_t>(N * H * dv));
  if (proj) {
    expand_kv_heads(proj + col.q, col.P, r.k_data, N, Hkv, G, dk);
    expand_kv_heads(proj + col.q + col.k, col.P, r.v_data, N, Hkv, G, dv);
  }
  r.k = head_view(r.k_data, B, T, H, H * dk, dk);
  r.v = head_view(r.v_data, B, T, H, H * dv, dv);
  return r;
}

// Adds (qkv_bias) the q, k and v biases to N projection rows.
void add_qkv_bias(const Model& m, int64_t layer, const Config& c, float* proj, int64_t N) {
  const LayerTensors& L = m.tensors().layers[layer];
  if (L.mixer_tensors[kQueryBias] == kNoTensor) return;
  const QkvColumns col(c);
  const float* bias[3] = {m.param(L.mixer_tensors[kQueryBias]),
                          m.param(L.mixer_tensors[kKeyBias]),
                          m.param(L.mixer_tensors[kValueBias])};
  const int64_t width[3] = {col.q, col.k, col.v};
  parallel_for_if(N * col.P > 65536, N, [&](int64_t n) {
    float* row = proj + n * col.P;
    for (int part = 0; part < 3; ++part) {
      for (int64_t i = 0; i < width[part]; ++i) row[i] += bias[part][i];
      row += width[part];
    }
  });
}

// The biases' gradients: column sums of the projection rows' gradient (before the rotation).
void accumulate_qkv_bias_grads(const MixerGrad& g, const Config& c) {
  const LayerTensors& L = g.model->tensors().layers[g.layer];
  if (L.mixer_tensors[kQueryBias] == kNoTensor) return;
  const QkvColumns col(c);
  const int64_t N = g.B * g.T;
  int64_t offset = 0;
  for (size_t part : {kQueryBias, kKeyBias, kValueBias}) {
    float* db = g.grads->tensor(L.mixer_tensors[part]);
    const int64_t width = part == kQueryBias ? col.q : part == kKeyBias ? col.k : col.v;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < width; ++i) db[i] += g.d_proj[n * col.P + offset + i];
    offset += width;
  }
}

class AttentionMixer final : public SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t,
                          int64_t) const override {
    const size_t lengths = cache_lengths_floats(B) + grouped_kv_floats(c, B * T);
    if (form == Form::Recurrent)
      return lengths + attention_step_workspace_floats(B, c.heads, c.head_value_dim());
    return lengths +
           attention_workspace_floats(T, c.key_dim(), c.head_value_dim(), kAttentionDefaultTile);
  }

  size_t backward_workspace_floats(const Config& c, Form, int64_t B, int64_t T,
                                   int64_t) const override {
    return 2 * grouped_kv_floats(c, B * T) +
           attention_backward_workspace_floats(B, T, c.heads, c.key_dim(), c.head_value_dim(),
                                               kAttentionDefaultTile);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Model& model = *p.model;
    const Config& c = model.layer_config(p.layer);
    const int64_t B = p.B, T = p.T;
    const QkvColumns col(c);
    add_qkv_bias(model, p.layer, c, p.proj, B * T);
    rotate_queries_keys(p, p.proj, p.proj + col.q, col.P, c.heads, c.key_dim(),
                        c.kv_head_count());
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, B * T);
    float* o = p.saved ? sv.o : p.out;
    const TensorView q = head_view(p.proj, B, T, c.heads, col.P, c.key_dim());
    const TensorView out = head_output_view(o, B, T, c);
    // From an empty sequence (training, or a pass without a state). In the chunkwise form too:
    // a chunk's queries against the keys of the earlier chunks and its own, causally, is what
    // the query-tiled kernel computes, and its backward serves both forms.
    if (!p.cache) {
      const HeadKv kv = head_kv(c, p.proj, B, T, arena);
      AttentionArgs a;
      a.q = q, a.k = kv.k, a.v = kv.v, a.out = out;
      a.logsumexp = p.saved ? sv.lse : nullptr;
      a.window = mixer_options<AttentionOptions>(c).window_size;
      attention_forward(a, arena);
      return o;
    }
    // The cache keeps each kv head once; its kernels share it across the query group.
    const int64_t Hkv = c.kv_head_count();
    const HeadKv kv{head_view(p.proj + col.q, B, T, Hkv, col.P, c.key_dim()),
                    head_view(p.proj + col.q + col.k, B, T, Hkv, col.P, c.head_value_dim())};
    AttentionCache cache = pass_cache<AttentionCache>(p, arena);
    if (is_decode_step(p))
      attention_step(q, kv.k, kv.v, out, cache, arena,
                     mixer_options<AttentionOptions>(c).window_size);
    else if (p.form == Form::Chunkwise)
      attention_chunkwise(q, kv.k, kv.v, out, cache, arena, p.chunk, kAttentionDefaultTile,
                          mixer_options<AttentionOptions>(c).window_size);
    else
      attention_prefill(q, kv.k, kv.v, out, cache, arena, kAttentionDefaultTile,
                        mixer_options<AttentionOptions>(c).window_size);
    return o;
  }

  const float* output(const MixerGrad& gr, float*) const override {
    return carve(gr.saved, gr.model->layer_config(gr.layer), gr.B * gr.T).o;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.layer_config(gr.layer);
    const int64_t B = gr.B, T = gr.T, N = B * T, H = c.heads, dk = c.key_dim();
    const QkvColumns col(c);
    const Saved sv = carve(gr.saved, c, N);
    zero_projection_grad(gr, col.P);
    const HeadKv kv = head_kv(c, gr.proj, B, T, arena);
    HeadKv dkv = head_kv(c, c.kv_groups() == 1 ? gr.d_proj : nullptr, B, T, arena);
    if (dkv.k_data) {  // the kernel accumulates into all heads' gradients
      std::fill(dkv.k_data, dkv.k_data + N * H * dk, 0.f);
      std::fill(dkv.v_data, dkv.v_data + N * c.value_embed_dim, 0.f);
    }
    AttentionGradArgs ga;
    ga.q = head_view(gr.proj, B, T, H, col.P, dk), ga.k = kv.k, ga.v = kv.v;
    ga.d_q = head_view(gr.d_proj, B, T, H, col.P, dk), ga.d_k = dkv.k, ga.d_v = dkv.v;
    ga.out = head_output_view(sv.o, B, T, c), ga.d_out = head_output_view(gr.d_out, B, T, c);
    ga.logsumexp = sv.lse;
    ga.window = mixer_options<AttentionOptions>(c).window_size;
    attention_backward(ga, arena);
    if (dkv.k_data) {
      const int64_t Hkv = c.kv_head_count(), G = c.kv_groups();
      reduce_kv_heads(dkv.k_data, gr.d_proj + col.q, col.P, N, Hkv, G, dk);
      reduce_kv_heads(dkv.v_data, gr.d_proj + col.q + col.k, col.P, N, Hkv, G,
                      c.head_value_dim());
    }
    rotate_back_query_key_grads(gr, gr.d_proj, gr.d_proj + col.q, col.P, H, dk,
                                c.kv_head_count());
    accumulate_qkv_bias_grads(gr, c);
  }
};

// The attention options of a model, applied to one of its attention layers.
void adapt_attention_config(Config& c) {
  const AttentionOptions& a = mixer_options<AttentionOptions>(c);
  if (a.heads) c.heads = a.heads;
  c.kv_heads = a.kv_heads;
  if (a.value_dim) c.value_embed_dim = a.value_dim;
  if (a.rope_theta) c.rope_theta = a.rope_theta;
  c.key_embed_dim = 0;
}

bool has_qkv_bias(const Config& c) { return mixer_options<AttentionOptions>(c).qkv_bias; }

void zero_bias(const Config&, int64_t, uint64_t, float* w, int64_t n) {
  std::fill(w, w + n, 0.f);
}

// Every token's keys [kv heads, d_k] and values [kv heads, d_v] (each kv head once).
int64_t attention_cache_floats(const Config& c) { return c.k_width() + c.v_width(); }

// Scores and values over the earlier tokens (mean_context; the chunkwise form reads what the
// parallel form does).
double attention_core_flops(const Config& c, int64_t T, Form form, int64_t) {
  const Form reads = form == Form::Chunkwise ? Form::Parallel : form;
  return 2.0 * mean_context(T, reads) * static_cast<double>(c.qk_width() + c.value_embed_dim);
}

}  // namespace

const MixerSpec& attention_mixer_spec() {
  static const MixerSpec spec{
      .name = "attention",
      .scope = "attention",
      .summary = "causal softmax attention with rotary positions (the transformer baseline)",
      .rotates = true,
      .keeps_tokens = true,
      .forms = {true, true, true, false},  // parallel, recurrent, chunkwise
      .tensors = {{"q_proj.bias",
                   [](const Config& c) { return std::vector<int64_t>{c.qk_width()}; }, zero_bias,
                   false, has_qkv_bias},
                  {"k_proj.bias", [](const Config& c) { return std::vector<int64_t>{c.k_width()}; },
                   zero_bias, false, has_qkv_bias},
                  {"v_proj.bias", [](const Config& c) { return std::vector<int64_t>{c.v_width()}; },
                   zero_bias, false, has_qkv_bias}},
      .options = &attention_options_codec(),
      .cache_floats_per_token_per_layer = attention_cache_floats,
      .core_flops_per_token = attention_core_flops,
      .block = block_instance<AttentionMixer>,
      .adapt_layer_config = adapt_attention_config,
      .hf = &attention_hf_layout()};
  return spec;
}

}  // namespace retnet::detail
