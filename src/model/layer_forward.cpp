// The forward layer loop: embedding, every block (norm, input projection, mixer, output
// projection; norm, gated FFN) and the final norm, shared by inference and training. Its backward
// is layer_backward.cpp.
#include <cfloat>
#include <cstring>

#include "layer_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/finite_check.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/parallel.h"
#include "retnet/core/quant.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {

void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
             int64_t ldx, bool accumulate, float* y, int64_t ldy) {
  const float beta = accumulate ? 1.f : 0.f;
  // The packed copy serves decoding (few rows), and prefill too when it is the only copy or in
  // half precision (prefill and decode then compute with the same weights); a float32 model that
  // kept its originals prefills straight from them.
  const PackedProjection* p = model.packed(w);
  if (p && !p->in_place.empty() && p->N == N && p->K == K) {  // weights used where they lie
    // The product's tensors (q|k|v|g, fc1|gate: one slice each) in one call.
    const int parts = static_cast<int>(p->in_place.size());
    const float* f32[kMaxRowMajorParts];
    const uint16_t* f16[kMaxRowMajorParts];
    const BFloat16* bf16[kMaxRowMajorParts];
    int64_t rows[kMaxRowMajorParts];
    for (int i = 0; i < parts; ++i) {
      const RowMajorSlice& s = p->in_place[static_cast<size_t>(i)];
      check_finite_in_place(s, K);
      f32[i] = s.f32;
      f16[i] = s.f16;
      bf16[i] = s.bf16;
      rows[i] = s.rows;
    }
    if (f32[0])
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, f32, rows, beta, y, ldy);
    else if (f16[0])
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, f16, rows, beta, y, ldy);
    else
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, bf16, rows, beta, y, ldy);
    return;
  }
  const bool use_packed = p && p->N == N && p->K == K &&
                          (M <= kSkinnyMaxRows || !p->f32 || !model.weights_complete());
  if (!use_packed)
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, model.param(w), K, beta, y, ldy);
  else if (p->quant)
    quant_gemm_nt(p->quant_type, M, N, K, x, ldx, p->quant, beta, y, ldy);
  else if (p->f16)
    packed_gemm_nt_f16(M, N, K, x, ldx, p->f16, beta, y, ldy);
  else if (p->bf16)
    packed_gemm_nt_bf16(M, N, K, x, ldx, p->bf16, beta, y, ldy);
  else
    packed_gemm_nt(M, N, K, x, ldx, p->f32, beta, y, ldy);
}

namespace {

// A checking pass's constant-state layer (one sequence): the mixer's recurrent step per token, on
// that token's rows of the pass's projection and rotation table, logging the layer's state after
// each. The projections around it stay one product over all the tokens.
const float* mixer_token_by_token(const MixerPass& pass, const StateView& state, int64_t layer,
                                  int64_t rotation_row, Arena& arena) {
  const Config& lc = pass.model->layer_config(layer);
  RETNET_CHECK(pass.B == 1 && !state.rows, "a checking pass runs one sequence, got {}", pass.B);
  const int64_t P = lc.projection_width(), vd = lc.value_embed_dim;
  const int64_t floats = lc.mixer->state_floats_per_layer(lc);
  const int64_t offset = pass.model->state_offset(layer);
  const LayerMixer& mixer = layer_mixer(lc);
  for (int64_t t = 0; t < pass.T; ++t) {
    const int64_t position = (pass.positions ? pass.positions[0] : 0) + t;
    MixerPass step = pass;
    step.T = 1;
    step.form = Form::Recurrent;
    step.proj = pass.proj + t * P;
    step.out = pass.out + t * vd;
    step.positions = &position;
    if (pass.rotation) step.rotation = pass.rotation + t * rotation_row;
    step.rotation_stride = 0;
    const size_t mark = arena.used();
    const float* mixed = mixer.forward(step, arena);
    if (mixed != step.out) std::memcpy(step.out, mixed, static_cast<size_t>(vd) * sizeof(float));
    arena.rewind(mark);
    std::memcpy(state.token_states + t * state.floats_per_sequence + offset, pass.state,
                static_cast<size_t>(floats) * sizeof(float));
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
  const int64_t N = B * T, d = c.embed_dim, F = c.ffn_dim;
  const float eps = static_cast<float>(c.layernorm_eps);
  float* x = acts.x;
  // Only a decode step runs some of a state's sequences in place (the other forms' kernels read a
  // batch's states contiguously).
  RETNET_CHECK(!state || !state->rows || (form == Form::Recurrent && state->first == 0),
               "a pass over chosen rows of a state is a recurrent step");

  const float scale = static_cast<float>(c.embed_scale());
  // A model prepared for inference in f16/bf16 keeps its embedding rows in that type too
  // (row-major, under the embedding's packed entry; a tied one: the LM head's panels).
  const PackedProjection* half_embed = model.packed(w.embed);
  if (half_embed && !half_embed->in_place.empty()) {
    // Rows read where they lie (a mapped file; tied: the LM head's own rows).
    const RowMajorSlice& s = half_embed->in_place.front();
    check_finite_in_place(s, d);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      float* row = x + n * d;
      if (s.f32)
        rowmajor_row(s.f32, d, d, tokens[n], scale, row);
      else if (s.f16)
        rowmajor_row(s.f16, d, d, tokens[n], scale, row);
      else
        rowmajor_row(s.bf16, d, d, tokens[n], scale, row);
    });
  } else if (half_embed && w.embed == w.output_projection) {
    // A tied embedding is the LM head: its rows are read from the head's panels.
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      float* row = x + n * d;
      if (half_embed->quant) {
        dequantize_panel_rows(half_embed->quant_type, half_embed->quant, d, tokens[n], 1, row, d);
        for (int64_t i = 0; i < d; ++i) row[i] *= scale;
      } else if (half_embed->f32)
        packed_row(half_embed->f32, d, tokens[n], scale, row);
      else if (half_embed->bf16)
        packed_row(half_embed->bf16, d, tokens[n], scale, row);
      else
        packed_row(half_embed->f16, d, tokens[n], scale, row);
    });
  } else if (half_embed) {
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      const size_t row = static_cast<size_t>(tokens[n]) * d;
      for (int64_t i = 0; i < d; ++i)
        x[n * d + i] = scale * (half_embed->bf16 ? bf16_to_float(half_embed->bf16[row + i].bits)
                                                 : half_to_float(half_embed->f16[row + i]));
    });
  } else {
    const float* embed = model.param(w.embed);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      for (int64_t i = 0; i < d; ++i) x[n * d + i] = scale * embed[tokens[n] * d + i];
    });
  }

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
      rotation_stride = rotation_table(*table_thetas, B, T, positions, acts.rotation);
      rotation_row = 2 * static_cast<int64_t>(table_thetas->size());
    }
    const bool has_state = state && state->data && lc.mixer->state_floats_per_layer;
    LayerActivations& a = acts.layers.empty() ? acts.shared : acts.layers[l];
    if (a.x_in) std::memcpy(a.x_in, x, N * d * sizeof(float));
    // Mixer sub-layer: x += out_proj(mixer(xn [q | k | v (| g)])).
    rmsnorm_forward(x, d, model.param(L.mixer_norm), a.xn1, d, a.rstd1, N, d, eps);
    // The input projections are adjacent in the parameter buffer: one GEMM.
    project(model, L.q_proj, N, P, d, a.xn1, d, false, a.proj, P);
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
    const float* mixed = state && state->token_states && has_state
                             ? mixer_token_by_token(mp, *state, l, rotation_row, arena)
                             : mixer.forward(mp, arena);
    arena.rewind(mark);  // the mixer's scratch is reused by the next layer
    project(model, L.out_proj, N, d, vd, mixed, vd, true, x, d);
    if (a.x_mid) std::memcpy(a.x_mid, x, N * d * sizeof(float));

    // FFN sub-layer: x += fc2(act(fc1 xn) * gate xn); fc1 and gate are one GEMM.
    rmsnorm_forward(x, d, model.param(L.final_norm), a.xn2, d, a.rstd2, N, d, eps);
    project(model, L.fc1, N, 2 * F, d, a.xn2, d, false, a.ffn, 2 * F);
    gated_activation_forward(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, a.h, a.ld_h, N, F);
    project(model, L.fc2, N, d, F, a.h, a.ld_h, true, x, d);
    check_finite_rows(x, N, d, d, {T, positions}, "the residual stream", l, largest_normable(d));
  }
  rmsnorm_forward(x, d, model.param(w.final_norm), acts.xn_f, d, acts.rstd_f, N, d, eps);
  if (logits) {
    project(model, w.output_projection, N, c.vocab_size, d, acts.xn_f, d, false, logits,
            c.vocab_size);
    check_finite_rows(logits, N, c.vocab_size, c.vocab_size, {T, positions}, "the logits", -1,
                      FLT_MAX);
  }
}

}  // namespace retnet::detail
