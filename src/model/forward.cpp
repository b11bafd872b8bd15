#include "retnet/model/forward.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <optional>

#include "finite_check.h"
#include "layers.h"
#include "mixer_layer.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"

namespace retnet {
namespace {

int64_t chunk_of(const Config& c, const ForwardOptions& o) {
  return o.chunk > 0 ? o.chunk : c.recurrent_chunk_size;
}

void check_tokens(const int32_t* tokens, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    RETNET_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
                 "token id {} at position {} is out of range for a vocabulary of {}", tokens[i], i,
                 vocab);
}

// y[M, N] = x[M, K] W^T (+ y when accumulate) for weight tensor `w` [N, K] (rows of adjacent
// tensors may follow: q, k, v, g are one product). Few rows use the model's decode packing.
void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
             int64_t ldx, bool accumulate, float* y, int64_t ldy) {
  const float beta = accumulate ? 1.f : 0.f;
  const PackedProjection* p = M <= kSkinnyMaxRows ? model.packed(w) : nullptr;
  if (p && p->N == N && p->K == K) {
    if (p->f16)
      packed_gemm_nt_f16(M, N, K, x, ldx, p->f16, beta, y, ldy);
    else
      packed_gemm_nt(M, N, K, x, ldx, p->f32, beta, y, ldy);
  } else {
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, model.param(w), K, beta, y, ldy);
  }
}

// logits [B, vocab] of each sequence's last token, from the final features xn [B, T, d]; starts:
// the sequences' positions before the pass (null: 0), for naming a non-finite logit's position.
void last_token_logits(const Model& model, const float* xn, int64_t B, int64_t T, float* logits,
                       const int64_t* starts) {
  const Config& c = model.config();
  project(model, model.tensors().output_projection, B, c.vocab_size, c.embed_dim,
          xn + (T - 1) * c.embed_dim, T * c.embed_dim, false, logits, c.vocab_size);
  detail::check_finite_rows(logits, B, c.vocab_size, c.vocab_size, {1, starts, T - 1}, "the logits",
                            -1, FLT_MAX);
}

}  // namespace

namespace detail {

TensorView head_view(float* p, int64_t B, int64_t T, int64_t H, int64_t ld, int64_t last) {
  TensorView t;
  t.data = p;
  t.ndim = 4;
  t.shape = {B, T, H, last};
  t.stride = {T * ld, ld, last, 1};
  return t;
}

size_t activation_floats(const Config& c, int64_t B, int64_t T, bool training) {
  const size_t N = static_cast<size_t>(B * T), d = c.embed_dim, vd = c.value_embed_dim;
  const size_t P = c.projection_width(), F = c.ffn_dim;
  auto fp = [](size_t n) { return Arena::footprint(n); };
  size_t shared = fp(N * d) + fp(N * vd) + fp(N * c.key_dim()) + fp(N * d);
  if (!training) return shared + fp(N * d) + fp(N * P) + fp(N * 2 * F);
  const size_t per_layer = fp(N * d) + fp(N) + fp(N * d) + fp(N * P) +
                           fp(layer_mixer(c.mixer).saved_floats(c, B, T)) + fp(N * d) + fp(N) +
                           fp(N * d) + fp(N * 2 * F) + fp(N * F);
  return shared + fp(N) + c.layers * per_layer;
}

Activations allocate_activations(Arena& arena, const Config& c, int64_t B, int64_t T,
                                 bool training) {
  const size_t N = static_cast<size_t>(B * T), d = c.embed_dim, vd = c.value_embed_dim;
  const size_t P = c.projection_width(), F = c.ffn_dim;
  Activations a;
  a.x = arena.alloc(N * d);
  a.go = arena.alloc(N * vd);
  a.rotation = arena.alloc(N * c.key_dim());
  a.xn_f = arena.alloc(N * d);
  if (!training) {
    LayerActivations l;
    l.xn1 = l.xn2 = arena.alloc(N * d);
    l.proj = arena.alloc(N * P);
    l.ffn = arena.alloc(N * 2 * F);
    l.h = l.ffn;
    l.ld_h = 2 * F;
    a.shared = l;
    return a;
  }
  a.rstd_f = arena.alloc(N);
  const size_t saved = layer_mixer(c.mixer).saved_floats(c, B, T);
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerActivations l;
    l.x_in = arena.alloc(N * d);
    l.rstd1 = arena.alloc(N);
    l.xn1 = arena.alloc(N * d);
    l.proj = arena.alloc(N * P);
    l.saved = arena.alloc(saved);
    l.x_mid = arena.alloc(N * d);
    l.rstd2 = arena.alloc(N);
    l.xn2 = arena.alloc(N * d);
    l.ffn = arena.alloc(N * 2 * F);
    l.h = arena.alloc(N * F);
    l.ld_h = static_cast<int64_t>(F);
    a.layers.push_back(l);
  }
  return a;
}

void run_layers(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                Form form, int64_t chunk, int64_t scan_tile, Arena& arena,
                const PassState& state, Activations& acts) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
  const int64_t F = c.ffn_dim, P = c.projection_width();
  const float eps = static_cast<float>(c.layernorm_eps);
  const LayerMixer& mixer = layer_mixer(c.mixer);
  float* x = acts.x;

  const float scale = static_cast<float>(c.embed_scale());
  const float* embed = model.param(w.embed);
  parallel_for_if(N * d > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < d; ++i) x[n * d + i] = scale * embed[tokens[n] * d + i];
  });

  // The rotation angles depend on the positions only: once per pass, not per layer.
  const bool rotates = mixer_uses_rotation(c.mixer);
  const int64_t rotation_stride =
      rotates ? rotation_table(model.thetas(), B, T, state.positions, acts.rotation) : 0;

  const int64_t state_per_layer = c.state_floats_per_sequence() / c.layers;
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerTensors& L = w.layers[l];
    LayerActivations& a = acts.layers.empty() ? acts.shared : acts.layers[l];
    if (a.x_in) std::memcpy(a.x_in, x, N * d * sizeof(float));
    // Mixer sub-layer: x += out_proj(mixer(xn [q | k | v (| g)])).
    rmsnorm_forward(x, d, model.param(L.mixer_norm), a.xn1, d, a.rstd1, N, d, eps);
    // The input projections are adjacent in the parameter buffer: one GEMM.
    project(model, L.q_proj, N, P, d, a.xn1, d, false, a.proj, P);
    MixerPass mp;
    mp.model = &model;
    mp.layer = l;
    mp.B = B;
    mp.T = T;
    mp.form = form;
    mp.chunk = chunk;
    mp.scan_tile = scan_tile;
    mp.proj = a.proj;
    mp.out = acts.go;
    mp.saved = a.saved;
    mp.state = state.data && state_per_layer > 0 ? state.data + l * state_per_layer : nullptr;
    mp.state_stride = state.stride;
    mp.cache = state.cache && !state.cache->empty() ? state.cache : nullptr;
    mp.first = state.first;
    mp.positions = state.positions;
    mp.rotation = rotates ? acts.rotation : nullptr;
    mp.rotation_stride = rotation_stride;
    const size_t mark = arena.used();
    const float* mixed = mixer.forward(mp, arena);
    arena.rewind(mark);  // the mixer's scratch is reused by the next layer
    project(model, L.out_proj, N, d, vd, mixed, vd, true, x, d);
    if (a.x_mid) std::memcpy(a.x_mid, x, N * d * sizeof(float));

    // FFN sub-layer: x += fc2(act(fc1 xn) * gate xn); fc1 and gate are one GEMM.
    rmsnorm_forward(x, d, model.param(L.final_norm), a.xn2, d, a.rstd2, N, d, eps);
    project(model, L.fc1, N, 2 * F, d, a.xn2, d, false, a.ffn, 2 * F);
    gated_activation_forward(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, a.h, a.ld_h, N, F);
    project(model, L.fc2, N, d, F, a.h, a.ld_h, true, x, d);
    check_finite_rows(x, N, d, d, {T, state.positions}, "the residual stream", l,
                      largest_normable(d));
  }
  rmsnorm_forward(x, d, model.param(w.final_norm), acts.xn_f, d, acts.rstd_f, N, d, eps);
  if (logits)
    project(model, w.output_projection, N, c.vocab_size, d, acts.xn_f, d, false, logits,
            c.vocab_size);
  if (logits)
    check_finite_rows(logits, N, c.vocab_size, c.vocab_size, {T, state.positions}, "the logits", -1,
                      FLT_MAX);
}

TensorView channel_view(const float* p, int64_t B, int64_t T, int64_t ld, int64_t C) {
  TensorView t;
  t.data = const_cast<float*>(p);
  t.ndim = 3;
  t.shape = {B, T, C, 1};
  t.stride = {T * ld, ld, 1, 0};
  return t;
}

void sigmoid_gated(const float* gate, int64_t ldg, const float* x, float* out, int64_t N,
                   int64_t C) {
  parallel_for_if(N * C > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < C; ++i)
      out[n * C + i] = x[n * C + i] / (1.f + std::exp(-gate[n * ldg + i]));
  });
}

void rotate_queries_keys(const MixerPass& p, float* q, float* k, int64_t ld, int64_t H,
                         int64_t dk) {
  for (float* x : {q, k})
    rotate_with_table(x, ld, p.B, p.T, H, dk, p.rotation, p.rotation_stride,
                      RotationDirection::Forward);
}

void rotate_back_query_key_grads(const MixerGrad& g, float* d_q, float* d_k, int64_t ld, int64_t H,
                                 int64_t dk) {
  for (float* x : {d_q, d_k})
    rotate_with_table(x, ld, g.B, g.T, H, dk, g.rotation, 0, RotationDirection::Inverse);
}

int64_t* cache_lengths(Arena& arena, const int64_t* positions, int64_t B) {
  int64_t* lengths = reinterpret_cast<int64_t*>(arena.alloc(static_cast<size_t>(2 * B)));
  for (int64_t b = 0; b < B; ++b) lengths[b] = positions ? positions[b] : 0;
  return lengths;
}

const LayerMixer& layer_mixer(MixerKind kind) {
  switch (kind) {
    case MixerKind::Retention:
      return retention_layer_mixer();
    case MixerKind::Attention:
      return attention_layer_mixer();
    case MixerKind::Linear:
    case MixerKind::Performer:
      return linear_layer_mixer();
    case MixerKind::AftSimple:
    case MixerKind::Rwkv:
      return decay_layer_mixer();
    case MixerKind::Aft:
      return aft_layer_mixer();
  }
  throw Error("unknown mixer");
}

}  // namespace detail

RecurrentState::RecurrentState(const Config& config, int64_t b)
    : batch(b),
      floats_per_sequence(config.state_floats_per_sequence()),
      data(static_cast<size_t>(b * config.state_floats_per_sequence()), 0.f),
      positions(static_cast<size_t>(b), 0) {
  if (config.cache_floats_per_token() > 0) {
    cache.layers = config.layers;
    cache.floats_per_token = config.cache_floats_per_token() / config.layers;
    cache.sequences = b;
    cache.storage.resize(static_cast<size_t>(config.layers));
  }
}

void RecurrentState::reset() {
  std::fill(data.begin(), data.end(), 0.f);
  std::fill(positions.begin(), positions.end(), 0);
}

void TokenCache::reserve(int64_t tokens) {
  if (empty() || tokens <= capacity) return;
  const int64_t grown = std::max({tokens, 2 * capacity, int64_t{16}});
  const size_t row = static_cast<size_t>(floats_per_token);
  for (auto& layer : storage) {
    std::vector<float> next(static_cast<size_t>(sequences * grown) * row);
    for (int64_t b = 0; b < sequences && capacity > 0; ++b)
      std::memcpy(next.data() + b * grown * row, layer.data() + b * capacity * row,
                  capacity * row * sizeof(float));
    layer.swap(next);
  }
  capacity = grown;
}

void TokenCache::copy_sequence(int64_t from, int64_t to, int64_t rows) {
  if (empty() || from == to || rows <= 0) return;
  for (int64_t l = 0; l < layers; ++l)
    std::memmove(block(l, to), block(l, from),
                 static_cast<size_t>(rows * floats_per_token) * sizeof(float));
}

size_t TokenCache::bytes() const {
  size_t total = 0;
  for (const auto& layer : storage) total += layer.size() * sizeof(float);
  return total;
}

size_t forward_workspace_floats(const Config& c, int64_t B, int64_t T,
                                const ForwardOptions& options) {
  const int64_t steps_T = options.form == Form::Recurrent ? 1 : T;
  size_t total = detail::activation_floats(c, B, steps_T, false);
  total += detail::layer_mixer(c.mixer).workspace_floats(c, options.form, B, steps_T,
                                                         chunk_of(c, options), options.scan_tile);
  if (options.form == Form::Recurrent)
    total += Arena::footprint(static_cast<size_t>(B)) + Arena::footprint(B * c.vocab_size);
  return total;
}

namespace {

void check_form(const Config& c, Form form) {
  RETNET_CHECK(mixer_has_form(c.mixer, form), "the {} mixer has no {} form", mixer_name(c.mixer),
               form_name(form));
}

}  // namespace

void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, RecurrentState* state) {
  const Config& c = model.config();
  check_form(c, options.form);
  // The parallel form of the mixers with a constant-size state neither reads nor writes one.
  if (options.form == Form::Parallel && (!state || !mixer_has_cache(c.mixer))) {
    RETNET_CHECK(B >= 1 && T >= 1, "forward needs at least one token per sequence (B = {}, T = {})",
                 B, T);
    RETNET_CHECK(state == nullptr || std::all_of(state->positions.begin(), state->positions.end(),
                                                 [](int64_t p) { return p == 0; }),
                 "the parallel form starts from an empty state; use chunkwise to continue one");
    check_tokens(tokens, B * T, c.vocab_size);
    arena.reserve(forward_workspace_floats(c, B, T, options));
    arena.reset();
    auto acts = detail::allocate_activations(arena, c, B, T, false);
    detail::run_layers(model, tokens, B, T, options.last_logits_only ? nullptr : logits,
                       options.form, chunk_of(c, options), options.scan_tile, arena, {}, acts);
    if (options.last_logits_only) last_token_logits(model, acts.xn_f, B, T, logits, nullptr);
    return;
  }
  std::optional<RecurrentState> local;
  if (!state) state = &local.emplace(c, B);
  forward_logits(model, tokens, B, T, logits, options, arena, state->view());
}

void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, const StateView& state) {
  const Config& c = model.config();
  check_form(c, options.form);
  RETNET_CHECK(B >= 1 && T >= 1, "forward needs at least one token per sequence (B = {}, T = {})",
               B, T);
  RETNET_CHECK(state.batch == B && state.floats_per_sequence == c.state_floats_per_sequence(),
               "state holds {} sequences of {} floats; this pass needs {} of {}", state.batch,
               state.floats_per_sequence, B, c.state_floats_per_sequence());
  const bool cached = mixer_has_cache(c.mixer);
  if (options.form == Form::Parallel && !cached)
    for (int64_t b = 0; b < B; ++b)
      RETNET_CHECK(state.positions[b] == 0,
                   "the parallel form starts from an empty state; use chunkwise to continue one");
  RETNET_CHECK(!cached || (state.cache &&
                           state.cache->floats_per_token * c.layers == c.cache_floats_per_token()),
               "the {} mixer needs a state with its token cache", mixer_name(c.mixer));
  check_tokens(tokens, B * T, c.vocab_size);
  if (cached) {
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b) longest = std::max(longest, state.positions[b]);
    state.cache->reserve(longest + T);
  }
  arena.reserve(forward_workspace_floats(c, B, T, options));
  arena.reset();
  detail::PassState ps{state.data, state.floats_per_sequence, state.positions, state.cache,
                       state.first};
  if (options.form != Form::Recurrent) {
    auto acts = detail::allocate_activations(arena, c, B, T, false);
    detail::run_layers(model, tokens, B, T, options.last_logits_only ? nullptr : logits,
                       options.form, chunk_of(c, options), options.scan_tile, arena, ps, acts);
    if (options.last_logits_only)
      last_token_logits(model, acts.xn_f, B, T, logits, state.positions);
    for (int64_t b = 0; b < B; ++b) state.positions[b] += T;
    return;
  }
  // Token by token through all layers, exactly as decoding runs.
  int32_t* column = reinterpret_cast<int32_t*>(arena.alloc(static_cast<size_t>(B)));
  float* step_logits = arena.alloc(static_cast<size_t>(B * c.vocab_size));
  auto acts = detail::allocate_activations(arena, c, B, 1, false);
  const size_t mark = arena.used();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) column[b] = tokens[b * T + t];
    arena.rewind(mark);
    const bool wanted = !options.last_logits_only || t == T - 1;
    detail::run_layers(model, column, B, 1, wanted ? step_logits : nullptr,
                       Form::Recurrent, chunk_of(c, options), 0, arena, ps, acts);
    for (int64_t b = 0; b < B; ++b) {
      if (wanted) {
        float* dst = options.last_logits_only ? logits + b * c.vocab_size
                                              : logits + (b * T + t) * c.vocab_size;
        std::memcpy(dst, step_logits + b * c.vocab_size, c.vocab_size * sizeof(float));
      }
      state.positions[b] += 1;
    }
  }
}

}  // namespace retnet
