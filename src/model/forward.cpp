#include "retnet/model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"
#include "layers.h"

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
    if (p->f16) packed_gemm_nt_f16(M, N, K, x, ldx, p->f16, beta, y, ldy);
    else packed_gemm_nt(M, N, K, x, ldx, p->f32, beta, y, ldy);
  } else {
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, model.param(w), K, beta, y, ldy);
  }
}

// logits [B, vocab] of each sequence's last token, from the final features xn [B, T, d].
void last_token_logits(const Model& model, const float* xn, int64_t B, int64_t T, float* logits) {
  const Config& c = model.config();
  project(model, model.tensors().output_projection, B, c.vocab_size, c.embed_dim,
          xn + (T - 1) * c.embed_dim, T * c.embed_dim, false, logits, c.vocab_size);
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
  const size_t P = 2 * d + 2 * vd, F = c.ffn_dim, H = c.heads;
  auto fp = [](size_t n) { return Arena::footprint(n); };
  size_t shared = fp(N * d) + fp(N * vd) + fp(static_cast<size_t>(T * c.key_dim())) + fp(N * d);
  if (!training) return shared + fp(N * d) + fp(N * P) + fp(N * vd) + fp(N * 2 * F);
  size_t per_layer = fp(N * d) + fp(N) + fp(N * d) + fp(N * P) + fp(N * vd) + fp(N * H * 2) +
                     fp(N * H) + fp(N * vd) + fp(N * d) + fp(N) + fp(N * d) + fp(N * 2 * F) +
                     fp(N * F);
  return shared + fp(N) + c.layers * per_layer;
}

Activations allocate_activations(Arena& arena, const Config& c, int64_t B, int64_t T,
                                 bool training) {
  const size_t N = static_cast<size_t>(B * T), d = c.embed_dim, vd = c.value_embed_dim;
  const size_t P = 2 * d + 2 * vd, F = c.ffn_dim, H = c.heads;
  Activations a;
  a.x = arena.alloc(N * d);
  a.go = arena.alloc(N * vd);
  a.cos_sin = arena.alloc(static_cast<size_t>(T * c.key_dim()));
  a.xn_f = arena.alloc(N * d);
  if (!training) {
    LayerActivations l;
    l.xn1 = l.xn2 = arena.alloc(N * d);
    l.proj = arena.alloc(N * P);
    l.o = l.on = arena.alloc(N * vd);
    l.ffn = arena.alloc(N * 2 * F);
    l.h = l.ffn;
    l.ld_h = 2 * F;
    a.shared = l;
    return a;
  }
  a.rstd_f = arena.alloc(N);
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerActivations l;
    l.x_in = arena.alloc(N * d);
    l.rstd1 = arena.alloc(N);
    l.xn1 = arena.alloc(N * d);
    l.proj = arena.alloc(N * P);
    l.o = arena.alloc(N * vd);
    l.stats = arena.alloc(N * H * 2);
    l.rstd_g = arena.alloc(N * H);
    l.on = arena.alloc(N * vd);
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
                RetentionForm form, int64_t chunk, int64_t scan_tile, Arena& arena, float* state,
                int64_t state_stride, const int64_t* positions, Activations& acts) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t N = B * T, d = c.embed_dim, vd = c.value_embed_dim, H = c.heads;
  const int64_t dk = c.key_dim(), dv = c.head_value_dim(), F = c.ffn_dim, P = 2 * d + 2 * vd;
  const float eps = static_cast<float>(c.layernorm_eps);
  float* x = acts.x;

  const float scale = static_cast<float>(c.embed_scale());
  const float* embed = model.param(w.embed);
#pragma omp parallel for schedule(static) if (N * d > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < d; ++i) x[n * d + i] = scale * embed[tokens[n] * d + i];

  const float key_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  const size_t state_per_layer = static_cast<size_t>(H * retention_state_floats_per_head(dk, dv));
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerTensors& L = w.layers[l];
    LayerActivations& a = acts.layers.empty() ? acts.shared : acts.layers[l];
    if (a.x_in) std::memcpy(a.x_in, x, N * d * sizeof(float));
    // Retention sub-layer: x += out(swish(g) * headnorm(retention(rot(q), rot(k * s), v))).
    rmsnorm_forward(x, d, model.param(L.retention_norm), a.xn1, d, a.rstd1, N, d, eps);
    // q, k, v, g are adjacent in the parameter buffer: one GEMM for the four projections.
    project(model, L.q_proj, N, P, d, a.xn1, d, false, a.proj, P);
    float* q = a.proj;
    float* k = a.proj + d;
    float* v = a.proj + 2 * d;
    float* g = a.proj + 2 * d + vd;
#pragma omp parallel for schedule(static) if (N * d > 65536)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < d; ++i) k[n * P + i] *= key_scale;
    rotate_forward(q, P, B, T, H, dk, model.thetas(), positions, acts.cos_sin);
    rotate_forward(k, P, B, T, H, dk, model.thetas(), positions, acts.cos_sin);

    RetentionArgs ra;
    ra.q = head_view(q, B, T, H, P, dk);
    ra.k = head_view(k, B, T, H, P, dk);
    ra.v = head_view(v, B, T, H, P, dv);
    ra.out = head_view(a.o, B, T, H, vd, dv);
    ra.gammas = model.gammas().data();
    ra.state = state ? state + l * state_per_layer : nullptr;
    ra.state_stride = state_stride;
    ra.positions = positions;
    ra.chunk = chunk;
    ra.scan_tile = scan_tile;
    ra.row_stats = a.stats;
    const size_t mark = arena.used();
    retention_forward(form, ra, arena);
    arena.rewind(mark);  // the retention scratch is reused by the next layer
    // Per-head RMSNorm without weight: rows of d_v.
    rmsnorm_forward(a.o, dv, nullptr, a.on, dv, a.rstd_g, N * H, dv, eps);
    gated_activation_forward(Activation::Swish, g, P, a.on, vd, acts.go, vd, N, vd);
    project(model, L.out_proj, N, d, vd, acts.go, vd, true, x, d);
    if (a.x_mid) std::memcpy(a.x_mid, x, N * d * sizeof(float));

    // FFN sub-layer: x += fc2(act(fc1 xn) * gate xn); fc1 and gate are one GEMM.
    rmsnorm_forward(x, d, model.param(L.final_norm), a.xn2, d, a.rstd2, N, d, eps);
    project(model, L.fc1, N, 2 * F, d, a.xn2, d, false, a.ffn, 2 * F);
    gated_activation_forward(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, a.h, a.ld_h, N, F);
    project(model, L.fc2, N, d, F, a.h, a.ld_h, true, x, d);
  }
  rmsnorm_forward(x, d, model.param(w.final_norm), acts.xn_f, d, acts.rstd_f, N, d, eps);
  if (logits) project(model, w.output_projection, N, c.vocab_size, d, acts.xn_f, d, false, logits,
                      c.vocab_size);
}

}  // namespace detail

RecurrentState::RecurrentState(const Config& config, int64_t b)
    : batch(b),
      floats_per_sequence(config.state_floats_per_sequence()),
      data(static_cast<size_t>(b * config.state_floats_per_sequence()), 0.f),
      positions(static_cast<size_t>(b), 0) {}

void RecurrentState::reset() {
  std::fill(data.begin(), data.end(), 0.f);
  std::fill(positions.begin(), positions.end(), 0);
}

size_t forward_workspace_floats(const Config& c, int64_t B, int64_t T,
                                const ForwardOptions& options) {
  int64_t steps_T = options.form == RetentionForm::Recurrent ? 1 : T;
  size_t total = detail::activation_floats(c, B, steps_T, false);
  total += retention_workspace_floats(options.form, B, steps_T, c.heads, c.key_dim(),
                                      c.head_value_dim(), chunk_of(c, options), options.scan_tile);
  if (options.form == RetentionForm::Recurrent)
    total += Arena::footprint(static_cast<size_t>(B)) + Arena::footprint(B * c.vocab_size);
  return total;
}

void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                    float* logits, const ForwardOptions& options, Arena& arena,
                    RecurrentState* state) {
  const Config& c = model.config();
  if (options.form == RetentionForm::Parallel) {
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
                       options.form, chunk_of(c, options), options.scan_tile, arena, nullptr, 0,
                       nullptr, acts);
    if (options.last_logits_only) last_token_logits(model, acts.xn_f, B, T, logits);
    return;
  }
  std::optional<RecurrentState> local;
  if (!state) state = &local.emplace(c, B);
  forward_logits(model, tokens, B, T, logits, options, arena, state->view());
}

void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                    float* logits, const ForwardOptions& options, Arena& arena,
                    const StateView& state) {
  const Config& c = model.config();
  RETNET_CHECK(B >= 1 && T >= 1, "forward needs at least one token per sequence (B = {}, T = {})",
               B, T);
  RETNET_CHECK(options.form != RetentionForm::Parallel,
               "the parallel form starts from an empty state; use chunkwise to continue one");
  RETNET_CHECK(state.batch == B && state.floats_per_sequence == c.state_floats_per_sequence(),
               "state holds {} sequences of {} floats; this pass needs {} of {}", state.batch,
               state.floats_per_sequence, B, c.state_floats_per_sequence());
  check_tokens(tokens, B * T, c.vocab_size);
  arena.reserve(forward_workspace_floats(c, B, T, options));
  arena.reset();
  if (options.form != RetentionForm::Recurrent) {
    auto acts = detail::allocate_activations(arena, c, B, T, false);
    detail::run_layers(model, tokens, B, T, options.last_logits_only ? nullptr : logits,
                       options.form, chunk_of(c, options), options.scan_tile, arena, state.data,
                       state.floats_per_sequence, state.positions, acts);
    if (options.last_logits_only) last_token_logits(model, acts.xn_f, B, T, logits);
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
                       RetentionForm::Recurrent, 0, 0, arena, state.data,
                       state.floats_per_sequence, state.positions, acts);
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
