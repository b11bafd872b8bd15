// Helpers the mixers' blocks share: views of projection rows, the gated output, the rotation of
// queries and keys by the pass's table, the cache lengths of a pass.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "retnet/core/parallel.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {

TensorView head_view(float* p, int64_t B, int64_t T, int64_t H, int64_t ld, int64_t last) {
  return TensorView{p, 4, {B, T, H, last}, {T * ld, ld, last, 1}};
}

TensorView channel_view(const float* p, int64_t B, int64_t T, int64_t ld, int64_t C) {
  return TensorView{const_cast<float*>(p), 3, {B, T, C, 1}, {T * ld, ld, 1, 0}};
}

void sigmoid_gated(const float* gate, int64_t ldg, const float* x, float* out, int64_t N,
                   int64_t C) {
  parallel_for_if(N * C > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < C; ++i)
      out[n * C + i] = x[n * C + i] / (1.f + std::exp(-gate[n * ldg + i]));
  });
}

namespace {
RotationPairs rotation_pairs(const Model& model) {
  // Every layer of a model rotates in its style (a hybrid model's tables differ in base only).
  return model.config().rotary == RotaryStyle::HalfSplit ? RotationPairs::HalfSplit
                                                         : RotationPairs::Interleaved;
}
}  // namespace

void enter_slice_from_state(const MixerPass& p, int64_t floats, Arena& arena) {
  const size_t n = static_cast<size_t>(p.B * floats);
  float* summary = arena.alloc(n);
  float* ones = arena.alloc(n);
  std::fill(ones, ones + n, 1.f);
  for (int64_t b = 0; b < p.B; ++b)
    std::memcpy(summary + b * floats, p.state + b * p.state_stride,
                static_cast<size_t>(floats) * sizeof(float));
  p.link->enter(p.layer, summary, ones, n);
  for (int64_t b = 0; b < p.B; ++b)
    std::memcpy(p.state + b * p.state_stride, summary + b * floats,
                static_cast<size_t>(floats) * sizeof(float));
}

void rotate_queries_keys(const MixerPass& p, float* q, float* k, int64_t ld, int64_t H,
                         int64_t dk, int64_t Hk) {
  for (float* x : {q, k})
    rotate_with_table(x, ld, p.B, p.T, x == k && Hk > 0 ? Hk : H, dk, p.rotation,
                      p.rotation_stride, RotationDirection::Forward, rotation_pairs(*p.model));
}

void rotate_back_query_key_grads(const MixerGrad& g, float* d_q, float* d_k, int64_t ld, int64_t H,
                                 int64_t dk, int64_t Hk) {
  for (float* x : {d_q, d_k})
    rotate_with_table(x, ld, g.B, g.T, x == d_k && Hk > 0 ? Hk : H, dk, g.rotation, 0,
                      RotationDirection::Inverse, rotation_pairs(*g.model));
}

ChannelQkv channel_qkv(const float* proj, int64_t B, int64_t T, int64_t C) {
  const int64_t ld = 3 * C;
  return {channel_view(proj, B, T, ld, C), channel_view(proj + C, B, T, ld, C),
          channel_view(proj + 2 * C, B, T, ld, C)};
}

HeadQkv head_qkv(const float* proj, int64_t B, int64_t T, const Config& c) {
  const int64_t P = c.projection_width(), d = c.embed_dim, H = c.heads;
  return {head_view(proj, B, T, H, P, c.key_dim()), head_view(proj + d, B, T, H, P, c.key_dim()),
          head_view(proj + 2 * d, B, T, H, P, c.head_value_dim())};
}

TensorView head_output_view(const float* out, int64_t B, int64_t T, const Config& c) {
  return head_view(out, B, T, c.heads, c.value_embed_dim, c.head_value_dim());
}

const float* sigmoid_gated_output(const MixerGrad& g, const float* x, float* scratch) {
  const int64_t vd = g.model->layer_config(g.layer).value_embed_dim;
  sigmoid_gated(g.proj, 3 * vd, x, scratch, g.B * g.T, vd);
  return scratch;
}

void zero_projection_grad(const MixerGrad& g, int64_t P) {
  std::memset(g.d_proj, 0, static_cast<size_t>(g.B * g.T * P) * sizeof(float));
}

ChannelGrad channel_grad(const MixerGrad& g, int64_t C) {
  zero_projection_grad(g, 3 * C);
  return {channel_qkv(g.proj, g.B, g.T, C), channel_qkv(g.d_proj, g.B, g.T, C),
          channel_view(g.d_out, g.B, g.T, C, C)};
}

int64_t* cache_lengths(Arena& arena, const int64_t* positions, int64_t B) {
  int64_t* lengths = reinterpret_cast<int64_t*>(arena.alloc(static_cast<size_t>(2 * B)));
  for (int64_t b = 0; b < B; ++b) lengths[b] = positions ? positions[b] : 0;
  return lengths;
}

}  // namespace retnet::detail
