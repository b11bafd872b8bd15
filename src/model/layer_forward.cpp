// The forward layer loop: embedding, every block (norm, input projection, mixer, output
// projection; norm, gated FFN) and the final norm, shared by inference and training. Its backward
// is layer_backward.cpp.
#include <cfloat>
#include <cstring>
#include <numeric>

#include "layer_loop.h"
#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/core/finite_check.h"
#include "retnet/model/mixer_layer.h"

namespace retnet::detail {

namespace {

// A checking pass's constant-state layer (one sequence): records what the mixer reads (it
// transforms its rows in place) for rewind_checked_state, then runs it over all the tokens in the
// pass's form, reading the state once. The state it leaves is after every checked token; any
// shorter prefix's comes from the record.
const float* mixer_recording_check(const Backend& be, const MixerPass& pass, const StateView& state,
                                   Arena& arena) {
  RETNET_CHECK(pass.B == 1 && !state.rows, "a checking pass runs one sequence, got {}", pass.B);
  const Config& lc = pass.model->layer_config(pass.layer);
  CheckLog& log = *state.check_log;
  const size_t l = static_cast<size_t>(pass.layer);
  auto record = [](std::vector<float>& to, const float* from, int64_t floats) {
    if (to.size() < static_cast<size_t>(floats)) to.resize(static_cast<size_t>(floats));
    std::memcpy(to.data(), from, static_cast<size_t>(floats) * sizeof(float));
  };
  record(log.proj[l], pass.proj, pass.T * lc.projection_width());
  return be.mixer_forward(layer_mixer(lc), pass, arena);
}

// check_finite_rows over a ragged pass's rows [N, cols]: each sequence's, naming its positions.
void check_finite_ragged(const float* x, int64_t cols, const StateView& state, const char* where,
                         int64_t layer, float limit) {
  int64_t offset = 0;
  for (int64_t b = 0; b < state.batch; ++b) {
    const int64_t T = state.lengths[b];
    // Row r of the sequence is row b * T + r of a [batch, T] buffer: sequence b, its position + r.
    check_finite_rows(x + offset * cols, T, cols, cols, {T, state.positions, 0, b * T}, where,
                      layer, limit);
    offset += T;
  }
}

// A ragged pass's rotation tables: each sequence's rows from its own position, one after another
// (sequence b's from the row where its tokens start).
void ragged_rotation_tables(const Backend& be, const std::vector<double>& thetas,
                            const StateView& state, int64_t rotation_row, float* table) {
  int64_t offset = 0;
  for (int64_t b = 0; b < state.batch; ++b) {
    be.rotation_table(thetas, 1, state.lengths[b], state.positions + b,
                      table + offset * rotation_row);
    offset += state.lengths[b];
  }
}

// A ragged pass's layer: the mixer over each sequence's tokens alone, from its own state, as a
// prefill of that sequence alone runs it (the same chunks from the same position).
const float* mixer_per_sequence(const Backend& be, const LayerMixer& mixer, const MixerPass& pass,
                                const StateView& state, int64_t rotation_row, Arena& arena) {
  const Config& lc = pass.model->layer_config(pass.layer);
  const int64_t P = lc.projection_width(), vd = lc.value_embed_dim;
  int64_t offset = 0;
  for (int64_t b = 0; b < state.batch; ++b) {
    // Its row from `data` (rows[b] or b) and in the cache (then first + b).
    const int64_t index = state.rows ? state.rows[b] : b, T = state.lengths[b];
    MixerPass one = pass;
    one.B = 1;
    one.T = T;
    one.proj = pass.proj + offset * P;
    one.out = pass.out + offset * vd;
    if (pass.state) one.state = pass.state + index * pass.state_stride;
    one.rows = nullptr;
    one.first = state.rows ? index : state.first + b;
    one.positions = state.positions + b;
    if (pass.rotation) one.rotation = pass.rotation + offset * rotation_row;
    one.rotation_stride = 0;
    const size_t mark = arena.used();
    const float* mixed = be.mixer_forward(mixer, one, arena);
    if (mixed != one.out)
      std::memcpy(one.out, mixed, static_cast<size_t>(T * vd) * sizeof(float));
    arena.rewind(mark);
    offset += T;
  }
  return pass.out;
}

}  // namespace

Form layer_form(const Config& model_config, const Config& layer, Form form, bool has_state) {
  if (form == Form::Parallel && has_state && !layer.mixer->keeps_tokens &&
      model_config.keeps_tokens())
    return Form::Chunkwise;
  return form;
}

size_t activation_floats(const Config& c, int64_t B, int64_t T, bool training) {
  const size_t N = static_cast<size_t>(B * T), d = c.embed_dim, vd = c.max_value_dim();
  const size_t P = c.max_projection_width(), F = c.ffn_dim;
  auto fp = [](size_t n) { return Arena::footprint(n); };
  size_t shared = fp(N * d) + fp(N * vd) + fp(N * c.max_key_dim()) + fp(N * d);
  if (!training) return shared + fp(N * d) + fp(N * P) + fp(N * 2 * F);
  size_t layers = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    const size_t Pl = lc.projection_width();
    layers += fp(N * d) + fp(N) + fp(N * d) + fp(N * Pl) +
              fp(layer_mixer(lc).saved_floats(lc, B, T)) + fp(N * d) + fp(N) + fp(N * d) +
              fp(N * 2 * F) + fp(N * F);
    if (!c.hybrid()) return shared + fp(N) + c.layers * layers;  // the layers are alike
  }
  return shared + fp(N) + layers;
}

Activations allocate_activations(Arena& arena, const Config& c, int64_t B, int64_t T,
                                 bool training) {
  const size_t N = static_cast<size_t>(B * T), d = c.embed_dim, vd = c.max_value_dim();
  const size_t P = c.max_projection_width(), F = c.ffn_dim;
  Activations a;
  a.x = arena.alloc(N * d);
  a.go = arena.alloc(N * vd);
  a.rotation = arena.alloc(N * c.max_key_dim());
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
  for (int64_t i = 0; i < c.layers; ++i) {
    const Config lc = c.layer(i);
    const size_t P = lc.projection_width(), saved = layer_mixer(lc).saved_floats(lc, B, T);
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
                const StateView* state, Activations& acts, SliceLink* link) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t* lengths = state ? state->lengths : nullptr;  // a ragged pass
  const int64_t N = lengths ? std::accumulate(lengths, lengths + B, int64_t{0}) : B * T;
  const int64_t d = c.embed_dim, F = c.ffn_dim;
  const float eps = static_cast<float>(c.layernorm_eps);
  float* x = acts.x;
  // Only a decode step or a ragged pass runs some of a state's sequences in place (the other
  // forms' kernels read a batch's states contiguously).
  RETNET_CHECK(!state || !state->rows ||
                   (state->first == 0 && (lengths || form == Form::Recurrent)),
               "a pass over chosen rows of a state is a recurrent step or a ragged pass");
  RETNET_CHECK(!lengths || (form != Form::Recurrent && !state->check_log && !link &&
                            acts.layers.empty() && state->positions),
               "a ragged pass is an inference prefill: not recurrent, checking or training");

  // A training pass's backward reads what the CPU mixers saved: it runs on the CPU backend.
  const Backend& be = acts.layers.empty() ? model.backend() : cpu_backend();
  be.embed(model, tokens, N, x);

  const int64_t* positions = state ? state->positions : nullptr;  // nullptr: all from 0
  // The rotation angles depend on the positions only: once per pass and table, not per layer.
  const std::vector<double>* table_thetas = nullptr;
  int64_t rotation_stride = 0, rotation_row = 0;

  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerTensors& L = w.layers[l];
    const Config& lc = model.layer_config(l);
    const LayerMixer& mixer = layer_mixer(lc);
    const int64_t vd = lc.value_embed_dim, P = lc.projection_width();
    const bool rotates = lc.mixer->rotates;
    if (rotates && table_thetas != &model.layer_thetas(l)) {
      table_thetas = &model.layer_thetas(l);
      rotation_row = 2 * static_cast<int64_t>(table_thetas->size());
      if (lengths)
        ragged_rotation_tables(be, *table_thetas, *state, rotation_row, acts.rotation);
      else
        rotation_stride = be.rotation_table(*table_thetas, B, T, positions, acts.rotation);
    }
    const bool has_state = state && state->data && lc.mixer->state_floats_per_layer;
    LayerActivations& a = acts.layers.empty() ? acts.shared : acts.layers[l];
    if (a.x_in) std::memcpy(a.x_in, x, N * d * sizeof(float));
    // Mixer sub-layer: x += out_proj(mixer(xn [q | k | v (| g)])).
    be.rmsnorm(x, d, model.param(L.mixer_norm), a.xn1, d, a.rstd1, N, d, eps);
    // The input projections are adjacent in the parameter buffer: one GEMM.
    be.project(model, L.q_proj, N, P, d, a.xn1, d, false, a.proj, P);
    MixerPass mp{.model = &model, .layer = l, .B = B, .T = T,
                 .form = layer_form(c, lc, form, has_state), .chunk = chunk,
                 .scan_tile = scan_tile, .proj = a.proj, .out = acts.go, .saved = a.saved};
    mp.state = has_state ? state->data + model.state_offset(l) : nullptr;
    mp.state_stride = state ? state->floats_per_sequence : 0;
    mp.cache = state && state->cache && !state->cache->empty() && model.cache_slot(l) >= 0
                   ? state->cache
                   : nullptr;
    mp.cache_layer = model.cache_slot(l);
    mp.first = state ? state->first : 0;
    mp.rows = state ? state->rows : nullptr;
    mp.positions = positions;
    mp.rotation = rotates ? acts.rotation : nullptr;
    mp.rotation_stride = rotation_stride;
    mp.link = link;
    const size_t mark = arena.used();
    const float* mixed = lengths ? mixer_per_sequence(be, mixer, mp, *state, rotation_row, arena)
                         : state && state->check_log && has_state
                             ? mixer_recording_check(be, mp, *state, arena)
                             : be.mixer_forward(mixer, mp, arena);
    arena.rewind(mark);  // the mixer's scratch is reused by the next layer
    be.project(model, L.out_proj, N, d, vd, mixed, vd, true, x, d);
    if (a.x_mid) std::memcpy(a.x_mid, x, N * d * sizeof(float));

    // FFN sub-layer: x += fc2(act(fc1 xn) * gate xn); fc1 and gate are one GEMM.
    be.rmsnorm(x, d, model.param(L.final_norm), a.xn2, d, a.rstd2, N, d, eps);
    be.project(model, L.fc1, N, 2 * F, d, a.xn2, d, false, a.ffn, 2 * F);
    be.gated_activation(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, a.h, a.ld_h, N, F);
    be.project(model, L.fc2, N, d, F, a.h, a.ld_h, true, x, d);
    if (lengths)
      check_finite_ragged(x, d, *state, "the residual stream", l, largest_normable(d));
    else
      check_finite_rows(x, N, d, d, {T, positions}, "the residual stream", l, largest_normable(d));
  }
  be.rmsnorm(x, d, model.param(w.final_norm), acts.xn_f, d, acts.rstd_f, N, d, eps);
  if (logits) {
    be.project(model, w.output_projection, N, c.vocab_size, d, acts.xn_f, d, false, logits,
               c.vocab_size);
    if (lengths)
      check_finite_ragged(logits, c.vocab_size, *state, "the logits", -1, FLT_MAX);
    else
      check_finite_rows(logits, N, c.vocab_size, c.vocab_size, {T, positions}, "the logits", -1,
                        FLT_MAX);
  }
}

}  // namespace retnet::detail
