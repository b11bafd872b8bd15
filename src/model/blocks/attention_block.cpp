// Softmax attention as a block's mixer: the transformer baseline. Rotary positions on q and k
// (the same rotation retention uses), scores scaled by 1 / sqrt(d_k), no gate, no head norm:
//   out = attention(rot(q), rot(k), v)
// Training runs the tiled online-softmax kernel; decoding keeps every key and value in the
// state's token cache (rows of [H, d_k] keys then [H, d_v] values, the kernel's layout).
#include <algorithm>

#include "../mixer_layer.h"
#include "retnet/mixers/attention.h"

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

class AttentionMixer final : public SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t T, int64_t,
                          int64_t) const override {
    const size_t lengths = cache_lengths_floats(B);
    if (form == Form::Recurrent)
      return lengths + attention_step_workspace_floats(B, c.heads, c.head_value_dim());
    return lengths +
           attention_workspace_floats(T, c.key_dim(), c.head_value_dim(), kAttentionDefaultTile);
  }

  size_t backward_workspace_floats(const Config& c, Form, int64_t B, int64_t T,
                                   int64_t) const override {
    return attention_backward_workspace_floats(B, T, c.heads, c.key_dim(), c.head_value_dim(),
                                               kAttentionDefaultTile);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Model& model = *p.model;
    const Config& c = model.config();
    const int64_t B = p.B, T = p.T, d = c.embed_dim;
    rotate_queries_keys(p, p.proj, p.proj + d, c.projection_width(), c.heads, c.key_dim());
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, B * T);
    float* o = p.saved ? sv.o : p.out;
    const auto [q, k, v] = head_qkv(p.proj, B, T, c);
    const TensorView out = head_output_view(o, B, T, c);
    if (!p.cache) {  // from an empty sequence (training, or a parallel pass without a state)
      AttentionArgs a;
      a.q = q, a.k = k, a.v = v, a.out = out;
      a.logsumexp = p.saved ? sv.lse : nullptr;
      attention_forward(a, arena);
      return o;
    }
    AttentionCache cache = pass_cache<AttentionCache>(p, arena);
    if (is_decode_step(p))
      attention_step(q, k, v, out, cache, arena);
    else
      attention_prefill(q, k, v, out, cache, arena);
    return o;
  }

  const float* output(const MixerGrad& gr, float*) const override {
    return carve(gr.saved, gr.model->config(), gr.B * gr.T).o;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.config();
    const int64_t B = gr.B, T = gr.T, P = c.projection_width();
    const Saved sv = carve(gr.saved, c, B * T);
    zero_projection_grad(gr, P);
    const HeadQkv x = head_qkv(gr.proj, B, T, c), dx = head_qkv(gr.d_proj, B, T, c);
    AttentionGradArgs ga;
    ga.q = x.q, ga.k = x.k, ga.v = x.v;
    ga.d_q = dx.q, ga.d_k = dx.k, ga.d_v = dx.v;
    ga.out = head_output_view(sv.o, B, T, c), ga.d_out = head_output_view(gr.d_out, B, T, c);
    ga.logsumexp = sv.lse;
    attention_backward(ga, arena);
    rotate_back_query_key_grads(gr, gr.d_proj, gr.d_proj + c.embed_dim, P, c.heads, c.key_dim());
  }
};

// Every token's keys [H, d_k] and values [H, d_v].
int64_t attention_cache_floats(const Config& c) { return c.embed_dim + c.value_embed_dim; }

// Scores and values over the earlier tokens (mean_context).
double attention_core_flops(const Config& c, int64_t T, Form form, int64_t) {
  return 2.0 * mean_context(T, form) * static_cast<double>(c.embed_dim + c.value_embed_dim);
}

}  // namespace

const MixerSpec& attention_mixer_spec() {
  static const MixerSpec spec{
      .name = "attention", .scope = "attention",
      .summary = "causal softmax attention with rotary positions (the transformer baseline)",
      .rotates = true, .keeps_tokens = true,
      .cache_floats_per_token_per_layer = attention_cache_floats,
      .core_flops_per_token = attention_core_flops, .block = block_instance<AttentionMixer>};
  return spec;
}

}  // namespace retnet::detail
