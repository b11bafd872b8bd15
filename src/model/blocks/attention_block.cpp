// Softmax attention as a block's mixer: the transformer baseline. Rotary positions on q and k
// (the same rotation retention uses), scores scaled by 1 / sqrt(d_k), no gate, no head norm:
//   out = attention(rot(q), rot(k), v)
// Training runs the tiled online-softmax kernel; decoding keeps every key and value in the
// state's token cache (rows of [H, d_k] keys then [H, d_v] values, the kernel's layout).
#include <algorithm>
#include <cstring>

#include "../mixer_layer.h"
#include "retnet/mixers/attention.h"

namespace retnet::detail {
namespace {

struct Saved {
  float *o, *lse;
};
Saved carve(float* base, const Config& c, int64_t N) {
  SavedCarver s(base);
  Saved r;
  r.o = s.take(N * c.value_embed_dim);
  r.lse = s.take(N * c.heads);
  return r;
}

class AttentionMixer final : public LayerMixer {
 public:
  size_t saved_floats(const Config& c, int64_t B, int64_t T) const override {
    const size_t N = static_cast<size_t>(B * T);
    return Arena::footprint(N * c.value_embed_dim) + Arena::footprint(N * c.heads);
  }

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
    const int64_t B = p.B, T = p.T, N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    float* q = p.proj;
    float* k = p.proj + d;
    float* v = p.proj + 2 * d;
    rotate_queries_keys(p, q, k, P, H, dk);
    Saved sv{};
    if (p.saved) sv = carve(p.saved, c, N);
    float* o = p.saved ? sv.o : p.out;
    const TensorView qv = head_view(q, B, T, H, P, dk), kv = head_view(k, B, T, H, P, dk);
    const TensorView vv = head_view(v, B, T, H, P, dv), ov = head_view(o, B, T, H, vd, dv);
    if (!p.cache) {  // from an empty sequence (training, or a parallel pass without a state)
      AttentionArgs a;
      a.q = qv;
      a.k = kv;
      a.v = vv;
      a.out = ov;
      a.logsumexp = p.saved ? sv.lse : nullptr;
      attention_forward(a, arena);
      return o;
    }
    int64_t* lengths = cache_lengths(arena, p.positions, B);
    AttentionCache cache;
    cache.data = p.cache->block(p.layer, p.first);
    cache.capacity = p.cache->capacity;
    cache.length = lengths;
    if (p.form == Form::Recurrent && T == 1)
      attention_step(qv, kv, vv, ov, cache, arena);
    else
      attention_prefill(qv, kv, vv, ov, cache, arena);
    return o;
  }

  const float* output(const MixerGrad& gr, float*) const override {
    return carve(const_cast<float*>(gr.saved), gr.model->config(), gr.B * gr.T).o;
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.config();
    const int64_t B = gr.B, T = gr.T, N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
    const int64_t H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
    const int64_t P = c.projection_width();
    const Saved sv = carve(const_cast<float*>(gr.saved), c, N);
    std::memset(gr.d_proj, 0, static_cast<size_t>(N * P) * sizeof(float));
    AttentionGradArgs ga;
    ga.q = head_view(gr.proj, B, T, H, P, dk);
    ga.k = head_view(gr.proj + d, B, T, H, P, dk);
    ga.v = head_view(gr.proj + 2 * d, B, T, H, P, dv);
    ga.out = head_view(sv.o, B, T, H, vd, dv);
    ga.d_out = head_view(gr.d_out, B, T, H, vd, dv);
    ga.d_q = head_view(gr.d_proj, B, T, H, P, dk);
    ga.d_k = head_view(gr.d_proj + d, B, T, H, P, dk);
    ga.d_v = head_view(gr.d_proj + 2 * d, B, T, H, P, dv);
    ga.logsumexp = sv.lse;
    attention_backward(ga, arena);
    rotate_back_query_key_grads(gr, gr.d_proj, gr.d_proj + d, P, H, dk);
  }
};

// Every token's keys [H, d_k] and values [H, d_v].
int64_t attention_cache_floats(const Config& c) { return c.embed_dim + c.value_embed_dim; }

// Scores and values over the earlier tokens: T / 2 on average in the parallel form, T for a step.
double attention_core_flops(const Config& c, int64_t T, Form form, int64_t) {
  const double context = form == Form::Parallel ? static_cast<double>(T) / 2.0 : T;
  return 2.0 * context * static_cast<double>(c.embed_dim + c.value_embed_dim);
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
