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

namespace retnet {
namespace {

// Activation buffers of one pass over N = B * T tokens, allocated in this order.
struct Buffers {
  float* x;        // [N, d] residual stream
  float* xn;       // [N, d] normalised input of a sub-layer
  float* proj;     // [N, 2d + 2vd] q | k | v | g
  float* o;        // [N, vd] retention output
  float* ffn;      // [N, 2 ffn] fc1 | gate, then the gated product in the fc1 half
  float* cos_sin;  // [2, T, d_k / 2] rotation table
};

std::vector<size_t> buffer_sizes(const Config& c, int64_t B, int64_t T) {
  const size_t N = static_cast<size_t>(B * T);
  return {N * c.embed_dim, N * c.embed_dim, N * (2 * c.embed_dim + 2 * c.value_embed_dim),
          N * c.value_embed_dim, N * 2 * c.ffn_dim, static_cast<size_t>(T * c.key_dim())};
}

Buffers allocate(Arena& arena, const Config& c, int64_t B, int64_t T) {
  auto s = buffer_sizes(c, B, T);
  Buffers b;
  float** slots[] = {&b.x, &b.xn, &b.proj, &b.o, &b.ffn, &b.cos_sin};
  for (size_t i = 0; i < s.size(); ++i) *slots[i] = arena.alloc(s[i]);
  return b;
}

int64_t chunk_of(const Config& c, const ForwardOptions& o) {
  return o.chunk > 0 ? o.chunk : c.recurrent_chunk_size;
}

void check_tokens(const int32_t* tokens, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    RETNET_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
                 "token id {} at position {} is out of range for a vocabulary of {}", tokens[i], i,
                 vocab);
}

// One pass of all layers over B x T tokens starting at `positions` (nullptr: 0).
void run_layers(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                RetentionForm form, const ForwardOptions& options, Arena& arena, float* state,
                int64_t state_stride, const int64_t* positions) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t N = B * T, d = c.embed_dim, vd = c.value_embed_dim, H = c.heads;
  const int64_t dk = c.key_dim(), dv = c.head_value_dim(), F = c.ffn_dim, P = 2 * d + 2 * vd;
  const float eps = static_cast<float>(c.layernorm_eps);
  Buffers buf = allocate(arena, c, B, T);

  const float scale = static_cast<float>(c.embed_scale());
  const float* embed = model.param(w.embed);
#pragma omp parallel for schedule(static) if (N * d > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < d; ++i) buf.x[n * d + i] = scale * embed[tokens[n] * d + i];

  const float key_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  const size_t state_per_layer = static_cast<size_t>(H * retention_state_floats_per_head(dk, dv));
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerTensors& L = w.layers[l];
    // Retention sub-layer: x += out(swish(g) * headnorm(retention(rot(q), rot(k * s), v))).
    rmsnorm_forward(buf.x, d, model.param(L.retention_norm), buf.xn, d, nullptr, N, d, eps);
    // q, k, v, g are adjacent in the parameter buffer: one GEMM for the four projections.
    sgemm(Trans::No, Trans::Yes, N, P, d, 1.f, buf.xn, d, model.param(L.q_proj), d, 0.f, buf.proj,
          P);
    float* q = buf.proj;
    float* k = buf.proj + d;
    float* v = buf.proj + 2 * d;
    float* g = buf.proj + 2 * d + vd;
#pragma omp parallel for schedule(static) if (N * d > 65536)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < d; ++i) k[n * P + i] *= key_scale;
    rotate_forward(q, P, B, T, H, dk, model.thetas(), positions, buf.cos_sin);
    rotate_forward(k, P, B, T, H, dk, model.thetas(), positions, buf.cos_sin);

    RetentionArgs ra;
    auto view = [&](float* p, int64_t ld, int64_t last) {
      TensorView t;
      t.data = p;
      t.ndim = 4;
      t.shape = {B, T, H, last};
      t.stride = {T * ld, ld, last, 1};
      return t;
    };
    ra.q = view(q, P, dk);
    ra.k = view(k, P, dk);
    ra.v = view(v, P, dv);
    ra.out = view(buf.o, vd, dv);
    ra.gammas = model.gammas().data();
    ra.state = state ? state + l * state_per_layer : nullptr;
    ra.state_stride = state_stride;
    ra.positions = positions;
    ra.chunk = chunk_of(c, options);
    ra.scan_tile = options.scan_tile;
    const size_t mark = arena.used();
    retention_forward(form, ra, arena);
    arena.rewind(mark);  // the retention scratch is reused by the next layer
    // Per-head RMSNorm without weight: rows of d_v.
    rmsnorm_forward(buf.o, dv, nullptr, buf.o, dv, nullptr, N * H, dv, eps);
    gated_activation_forward(Activation::Swish, g, P, buf.o, vd, buf.o, vd, N, vd);
    sgemm(Trans::No, Trans::Yes, N, d, vd, 1.f, buf.o, vd, model.param(L.out_proj), vd, 1.f, buf.x,
          d);

    // FFN sub-layer: x += fc2(act(fc1 xn) * gate xn); fc1 and gate are one GEMM.
    rmsnorm_forward(buf.x, d, model.param(L.final_norm), buf.xn, d, nullptr, N, d, eps);
    sgemm(Trans::No, Trans::Yes, N, 2 * F, d, 1.f, buf.xn, d, model.param(L.fc1), d, 0.f, buf.ffn,
          2 * F);
    gated_activation_forward(c.activation, buf.ffn, 2 * F, buf.ffn + F, 2 * F, buf.ffn, 2 * F, N,
                             F);
    sgemm(Trans::No, Trans::Yes, N, d, F, 1.f, buf.ffn, 2 * F, model.param(L.fc2), F, 1.f, buf.x,
          d);
  }
  rmsnorm_forward(buf.x, d, model.param(w.final_norm), buf.xn, d, nullptr, N, d, eps);
  sgemm(Trans::No, Trans::Yes, N, c.vocab_size, d, 1.f, buf.xn, d, model.param(w.output_projection),
        d, 0.f, logits, c.vocab_size);
}

}  // namespace

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
  size_t total = 0;
  for (size_t s : buffer_sizes(c, B, steps_T)) total += Arena::footprint(s);
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
  RETNET_CHECK(B >= 1 && T >= 1, "forward needs at least one token per sequence (B = {}, T = {})",
               B, T);
  check_tokens(tokens, B * T, c.vocab_size);
  arena.reserve(forward_workspace_floats(c, B, T, options));
  arena.reset();
  if (options.form == RetentionForm::Parallel) {
    RETNET_CHECK(state == nullptr || std::all_of(state->positions.begin(), state->positions.end(),
                                                 [](int64_t p) { return p == 0; }),
                 "the parallel form starts from an empty state; use chunkwise to continue one");
    run_layers(model, tokens, B, T, logits, options.form, options, arena, nullptr, 0, nullptr);
    return;
  }
  std::optional<RecurrentState> local;
  if (!state) state = &local.emplace(c, B);
  RETNET_CHECK(state->batch == B && state->floats_per_sequence == c.state_floats_per_sequence(),
               "state holds {} sequences of {} floats; this pass needs {} of {}", state->batch,
               state->floats_per_sequence, B, c.state_floats_per_sequence());
  if (options.form != RetentionForm::Recurrent) {
    run_layers(model, tokens, B, T, logits, options.form, options, arena, state->data.data(),
               state->floats_per_sequence, state->positions.data());
  } else {
    // Token by token through all layers, exactly as decoding runs.
    int32_t* column = reinterpret_cast<int32_t*>(arena.alloc(static_cast<size_t>(B)));
    float* step_logits = arena.alloc(static_cast<size_t>(B * c.vocab_size));
    size_t mark = arena.used();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) column[b] = tokens[b * T + t];
      arena.rewind(mark);  // keep column and step_logits
      run_layers(model, column, B, 1, step_logits, RetentionForm::Recurrent, options, arena,
                 state->data.data(), state->floats_per_sequence, state->positions.data());
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(logits + (b * T + t) * c.vocab_size, step_logits + b * c.vocab_size,
                    c.vocab_size * sizeof(float));
        state->positions[b] += 1;
      }
    }
    return;
  }
  for (int64_t b = 0; b < B; ++b) state->positions[b] += T;
}

}  // namespace retnet
