#include "retnet/model/forward.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <optional>

#include "layer_loop.h"
#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/core/finite_check.h"
#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"
#include "retnet/model/mixer_layer.h"
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

// logits [B, vocab] of each sequence's last token, from the final features xn [B, T, d]; starts:
// the sequences' positions before the pass (null: 0), for naming a non-finite logit's position.
void last_token_logits(const Model& model, const float* xn, int64_t B, int64_t T, float* logits,
                       const int64_t* starts) {
  const Config& c = model.config();
  model.backend().project(model, model.tensors().output_projection, B, c.vocab_size, c.embed_dim,
                          xn + (T - 1) * c.embed_dim, T * c.embed_dim, false, logits, c.vocab_size);
  check_finite_rows(logits, B, c.vocab_size, c.vocab_size, {1, starts, T - 1}, "the logits", -1,
                    FLT_MAX);
}

}  // namespace

namespace {

// The largest layer's mixer scratch for B x T tokens (each layer rewinds it).
size_t mixer_workspace_floats(const Config& c, int64_t B, int64_t T,
                              const ForwardOptions& options) {
  size_t mixer = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    // The layer's form with a state and without one (a hybrid's parallel prefill differs).
    for (bool has_state : {false, true}) {
      const Form form = detail::layer_form(c, lc, options.form, has_state);
      mixer = std::max(mixer, detail::layer_mixer(lc).workspace_floats(
                                  lc, form, B, T, chunk_of(c, options), options.scan_tile));
    }
    if (!c.hybrid()) break;
  }
  return mixer;
}

}  // namespace

size_t forward_workspace_floats(const Config& c, int64_t B, int64_t T,
                                const ForwardOptions& options) {
  const int64_t steps_T = options.form == Form::Recurrent ? 1 : T;
  size_t total = detail::activation_floats(c, B, steps_T, false);
  total += mixer_workspace_floats(c, B, steps_T, options);
  if (options.form == Form::Recurrent)
    total += Arena::footprint(static_cast<size_t>(B)) + Arena::footprint(B * c.vocab_size);
  return total;
}

namespace {

void check_form(const Config& c, Form form) {
  RETNET_CHECK(c.has_form(form), "the {} mixer has no {} form", c.mixer_description(),
               form_name(form));
}

}  // namespace

void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, State* state) {
  const Config& c = model.config();
  check_form(c, options.form);
  // The parallel form of the mixers with a constant-size state neither reads nor writes one.
  if (options.form == Form::Parallel && (!state || !c.keeps_tokens())) {
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
                       options.form, chunk_of(c, options), options.scan_tile, arena, nullptr,
                       acts);
    if (options.last_logits_only) last_token_logits(model, acts.xn_f, B, T, logits, nullptr);
    return;
  }
  std::optional<State> local;
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
  const bool cached = c.keeps_tokens();
  if (options.form == Form::Parallel && !cached)
    for (int64_t b = 0; b < B; ++b)
      RETNET_CHECK(state.positions[b] == 0,
                   "the parallel form starts from an empty state; use chunkwise to continue one");
  RETNET_CHECK(
      !cached || (state.cache && state.cache->floats_per_token == c.cache_floats_per_token()),
      "the {} mixer needs a state with its token cache", c.mixer_description());
  check_tokens(tokens, B * T, c.vocab_size);
  if (cached) {
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b) longest = std::max(longest, state.positions[b]);
    state.cache->reserve(longest + T);
  }
  arena.reserve(forward_workspace_floats(c, B, T, options));
  arena.reset();
  if (options.form != Form::Recurrent) {
    auto acts = detail::allocate_activations(arena, c, B, T, false);
    detail::run_layers(model, tokens, B, T, options.last_logits_only ? nullptr : logits,
                       options.form, chunk_of(c, options), options.scan_tile, arena, &state, acts);
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
                       Form::Recurrent, chunk_of(c, options), 0, arena, &state, acts);
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

void forward_ragged_last_logits(const Model& model, const int32_t* tokens, int64_t B,
                                float* logits, const ForwardOptions& options, Arena& arena,
                                const StateView& state) {
  const Config& c = model.config();
  check_form(c, options.form);
  RETNET_CHECK(options.form != Form::Recurrent,
               "a ragged prefill runs the chunkwise, scan or parallel form, not recurrent");
  RETNET_CHECK(B >= 1 && state.lengths && state.positions,
               "a ragged prefill needs at least one sequence and each one's length (B = {})", B);
  RETNET_CHECK(state.batch == B && state.floats_per_sequence == c.state_floats_per_sequence(),
               "state holds {} sequences of {} floats; this pass needs {} of {}", state.batch,
               state.floats_per_sequence, B, c.state_floats_per_sequence());
  const bool cached = c.keeps_tokens();
  RETNET_CHECK(
      !cached || (state.cache && state.cache->floats_per_token == c.cache_floats_per_token()),
      "the {} mixer needs a state with its token cache", c.mixer_description());
  int64_t N = 0, longest = 0, furthest = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t T = state.lengths[b];
    RETNET_CHECK(T >= 1, "a ragged prefill reads at least one token per sequence; sequence {} "
                 "has {}", b, T);
    RETNET_CHECK(options.form != Form::Parallel || cached || state.positions[b] == 0,
                 "the parallel form starts from an empty state; use chunkwise to continue one");
    for (int64_t i = 0; i < T; ++i)
      RETNET_CHECK(tokens[N + i] >= 0 && tokens[N + i] < c.vocab_size,
                   "token id {} at position {} of sequence {} is out of range for a vocabulary "
                   "of {}",
                   tokens[N + i], i, b, c.vocab_size);
    N += T;
    longest = std::max(longest, T);
    furthest = std::max(furthest, state.positions[b] + T);
  }
  if (cached) state.cache->reserve(furthest);
  const size_t last_rows = static_cast<size_t>(B * c.embed_dim);
  arena.reserve(detail::activation_floats(c, 1, N, false) +
                mixer_workspace_floats(c, 1, longest, options) + Arena::footprint(last_rows) +
                Arena::footprint(static_cast<size_t>(2 * B)));
  arena.reset();
  float* last = arena.alloc(last_rows);  // each sequence's last final features
  int64_t* lasts = reinterpret_cast<int64_t*>(arena.alloc(static_cast<size_t>(2 * B)));
  auto acts = detail::allocate_activations(arena, c, 1, N, false);
  detail::run_layers(model, tokens, B, 0, nullptr, options.form, chunk_of(c, options),
                     options.scan_tile, arena, &state, acts);
  int64_t end = 0;
  for (int64_t b = 0; b < B; ++b) {
    end += state.lengths[b];
    std::memcpy(last + b * c.embed_dim, acts.xn_f + (end - 1) * c.embed_dim,
                static_cast<size_t>(c.embed_dim) * sizeof(float));
  }
  // The last rows as a [B, 1] pass: a non-finite logit is named at its sequence's last position.
  for (int64_t b = 0; b < B; ++b) lasts[b] = state.positions[b] + state.lengths[b] - 1;
  model.backend().project(model, model.tensors().output_projection, B, c.vocab_size, c.embed_dim,
                          last, c.embed_dim, false, logits, c.vocab_size);
  check_finite_rows(logits, B, c.vocab_size, c.vocab_size, {1, lasts}, "the logits", -1,
                    FLT_MAX);
  for (int64_t b = 0; b < B; ++b) state.positions[b] += state.lengths[b];
}

void forward_features(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                      float* features, const ForwardOptions& options, Arena& arena) {
  const Config& c = model.config();
  check_form(c, options.form);
  RETNET_CHECK(options.form != Form::Recurrent,
               "forward_features runs a whole sequence at once: the parallel, chunkwise or scan "
               "form, not recurrent");
  RETNET_CHECK(B >= 1 && T >= 1, "forward needs at least one token per sequence (B = {}, T = {})",
               B, T);
  check_tokens(tokens, B * T, c.vocab_size);
  std::optional<State> local;
  StateView view;
  if (options.form != Form::Parallel) {
    view = local.emplace(c, B).view();
    if (c.keeps_tokens()) view.cache->reserve(T);
  }
  arena.reserve(forward_workspace_floats(c, B, T, options));
  arena.reset();
  auto acts = detail::allocate_activations(arena, c, B, T, false);
  detail::run_layers(model, tokens, B, T, nullptr, options.form, chunk_of(c, options),
                     options.scan_tile, arena, local ? &view : nullptr, acts);
  std::memcpy(features, acts.xn_f, static_cast<size_t>(B * T * c.embed_dim) * sizeof(float));
}

}  // namespace retnet
