#include "retnet/model/training.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "finite_check.h"
#include "layers.h"
#include "mixer_layer.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"

namespace retnet {
namespace {

// Rows of the LM head processed at once by the fused loss: bounds its logits buffer.
constexpr int64_t kLossBlock = 256;

int64_t chunk_of(const Config& c, const TrainingOptions& o) {
  return o.chunk > 0 ? o.chunk : c.recurrent_chunk_size;
}

// Scratch of the backward pass, beyond the saved activations.
struct GradScratch {
  float* dx;      // [N, d] gradient of the residual stream
  float* dxn;     // [N, d]
  float* dproj;   // [N, P]
  float* dgo;     // [N, vd] gradient of the mixer's output
  float* go;      // [N, vd] the mixer's output (recomputed by some mixers)
  float* dffn;    // [N, 2F]
  float* dh;      // [N, F]
  float* logits;  // [kLossBlock, V]
};

size_t grad_scratch_floats(const Config& c, int64_t N) {
  const size_t d = c.embed_dim, vd = c.value_embed_dim, P = c.projection_width(), F = c.ffn_dim;
  auto fp = [](size_t n) { return Arena::footprint(n); };
  return 2 * fp(N * d) + fp(N * P) + 2 * fp(N * vd) + fp(N * 2 * F) + fp(N * F) +
         fp(kLossBlock * c.vocab_size);
}

GradScratch allocate_grads(Arena& arena, const Config& c, int64_t N) {
  const size_t d = c.embed_dim, vd = c.value_embed_dim, P = c.projection_width(), F = c.ffn_dim;
  GradScratch g;
  g.dx = arena.alloc(N * d);
  g.dxn = arena.alloc(N * d);
  g.dproj = arena.alloc(N * P);
  g.dgo = arena.alloc(N * vd);
  g.go = arena.alloc(N * vd);
  g.dffn = arena.alloc(N * 2 * F);
  g.dh = arena.alloc(N * F);
  g.logits = arena.alloc(kLossBlock * c.vocab_size);
  return g;
}

// Cross-entropy over the final features, block by block: logits = xn W^T, loss, and with grads
// d xn = dlogits W and dW += dlogits^T xn, where dlogits = (softmax - onehot) / N. Rows are
// sequences of T tokens (for naming where a logit overflows).
double fused_cross_entropy(const Model& model, const float* xn, const int32_t* targets, int64_t N,
                           int64_t T, float* logits, float* dxn, float* dW) {
  const int64_t d = model.config().embed_dim, V = model.config().vocab_size;
  const float* W = model.param(model.tensors().output_projection);
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += kLossBlock) {
    const int64_t R = std::min(kLossBlock, N - r0);
    sgemm(Trans::No, Trans::Yes, R, V, d, 1.f, xn + r0 * d, d, W, d, 0.f, logits, V);
    detail::check_finite_rows(logits, R, V, V, {T, nullptr, 0, r0}, "the logits", -1, FLT_MAX);
    double block_loss = 0;
#pragma omp parallel for schedule(static) reduction(+ : block_loss) if (R * V > 16384)
    for (int64_t r = 0; r < R; ++r) {
      float* z = logits + r * V;
      const float m = *std::max_element(z, z + V);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j] - m));
      const double lse = m + std::log(sum);
      const int32_t t = targets[r0 + r];
      block_loss += lse - z[t];
      if (dxn) {
        const float inv_n = 1.f / static_cast<float>(N);
        for (int64_t j = 0; j < V; ++j)
          z[j] = static_cast<float>(std::exp(static_cast<double>(z[j]) - lse)) * inv_n;
        z[t] -= inv_n;
      }
    }
    total += block_loss;
    if (dxn) {
      sgemm(Trans::No, Trans::No, R, d, V, 1.f, logits, V, W, d, 0.f, dxn + r0 * d, d);
      sgemm(Trans::Yes, Trans::No, V, d, R, 1.f, logits, V, xn + r0 * d, d, 1.f, dW, d);
    }
  }
  return total / static_cast<double>(N);
}

}  // namespace

size_t training_workspace_floats(const Config& c, int64_t B, int64_t T, const TrainingOptions& o) {
  const int64_t N = B * T;
  const detail::LayerMixer& mixer = detail::layer_mixer(c.mixer);
  return detail::activation_floats(c, B, T, true) + grad_scratch_floats(c, N) +
         Arena::footprint(static_cast<size_t>(B * c.state_floats_per_sequence())) +
         std::max(mixer.workspace_floats(c, o.form, B, T, chunk_of(c, o), 0),
                  mixer.backward_workspace_floats(c, o.form, B, T, chunk_of(c, o)));
}

double loss_and_gradients(const Model& model, const int32_t* tokens, const int32_t* targets,
                          int64_t B, int64_t T, const TrainingOptions& o, Arena& arena,
                          ParamBuffer* grads) {
  const Config& c = model.config();
  RETNET_CHECK(o.form == Form::Parallel || o.form == Form::Chunkwise,
               "training runs the parallel or the chunkwise form, not {}",
               form_name(o.form));
  RETNET_CHECK(mixer_trains_with(c.mixer, o.form), "the {} mixer has no {} form to train with",
               mixer_name(c.mixer), form_name(o.form));
  RETNET_CHECK(B >= 1 && T >= 1, "a training batch needs B >= 1 and T >= 1");
  const int64_t N = B * T, d = c.embed_dim, vd = c.value_embed_dim;
  const int64_t F = c.ffn_dim, P = c.projection_width();
  for (int64_t i = 0; i < N; ++i)
    RETNET_CHECK(
        tokens[i] >= 0 && tokens[i] < c.vocab_size && targets[i] >= 0 && targets[i] < c.vocab_size,
        "token or target id out of range for a vocabulary of {} at position {}", c.vocab_size, i);
  if (grads)
    RETNET_CHECK(grads->size() == model.params().size(),
                 "gradient buffer has {} floats, the model {}", grads->size(),
                 model.params().size());
  arena.reserve(training_workspace_floats(c, B, T, o));
  arena.reset();
  const int64_t chunk = chunk_of(c, o);
  detail::Activations acts = detail::allocate_activations(arena, c, B, T, true);
  GradScratch g = allocate_grads(arena, c, N);
  // The chunkwise form carries a state across chunks: a fresh one per pass.
  float* state = nullptr;
  if (o.form == Form::Chunkwise) {
    state = arena.alloc(static_cast<size_t>(B * c.state_floats_per_sequence()));
    std::fill(state, state + B * c.state_floats_per_sequence(), 0.f);
  }
  detail::PassState ps;
  ps.data = state;
  ps.stride = c.state_floats_per_sequence();
  detail::run_layers(model, tokens, B, T, nullptr, o.form, chunk, 0, arena, ps, acts);
  const ModelTensors& w = model.tensors();
  if (!grads)
    return fused_cross_entropy(model, acts.xn_f, targets, N, T, g.logits, nullptr, nullptr);

  auto grad = [&](size_t index) { return grads->tensor(index); };
  const double loss = fused_cross_entropy(model, acts.xn_f, targets, N, T, g.logits, g.dxn,
                                          grad(w.output_projection));
  std::fill(g.dx, g.dx + N * d, 0.f);
  rmsnorm_backward(acts.x, d, model.param(w.final_norm), acts.rstd_f, g.dxn, d, g.dx, d,
                   grad(w.final_norm), N, d);

  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const LayerTensors& L = w.layers[l];
    const detail::LayerActivations& a = acts.layers[l];
    // FFN: x_out = x_mid + fc2(h), h = act(fc1 xn2) * gate xn2.
    sgemm(Trans::No, Trans::No, N, F, d, 1.f, g.dx, d, model.param(L.fc2), F, 0.f, g.dh, F);
    sgemm(Trans::Yes, Trans::No, d, F, N, 1.f, g.dx, d, a.h, a.ld_h, 1.f, grad(L.fc2), F);
    gated_activation_backward(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, g.dh, F, g.dffn, 2 * F,
                              g.dffn + F, 2 * F, N, F);
    // fc1 and gate are adjacent: one GEMM for both weight gradients, one for the input gradient.
    sgemm(Trans::Yes, Trans::No, 2 * F, d, N, 1.f, g.dffn, 2 * F, a.xn2, d, 1.f, grad(L.fc1), d);
    sgemm(Trans::No, Trans::No, N, d, 2 * F, 1.f, g.dffn, 2 * F, model.param(L.fc1), d, 0.f, g.dxn,
          d);
    rmsnorm_backward(a.x_mid, d, model.param(L.final_norm), a.rstd2, g.dxn, d, g.dx, d,
                     grad(L.final_norm), N, d);

    // Mixer: x_mid = x_in + out_proj(mixer(proj)).
    detail::MixerGrad mg;
    mg.model = &model;
    mg.layer = l;
    mg.B = B;
    mg.T = T;
    mg.form = o.form;
    mg.chunk = chunk;
    mg.proj = a.proj;
    mg.saved = a.saved;
    mg.rotation = acts.rotation;
    mg.d_out = g.dgo;
    mg.d_proj = g.dproj;
    mg.grads = grads;
    const detail::LayerMixer& mixer = detail::layer_mixer(c.mixer);
    const float* go = mixer.output(mg, g.go);
    sgemm(Trans::Yes, Trans::No, d, vd, N, 1.f, g.dx, d, go, vd, 1.f, grad(L.out_proj), vd);
    sgemm(Trans::No, Trans::No, N, vd, d, 1.f, g.dx, d, model.param(L.out_proj), vd, 0.f, g.dgo,
          vd);
    const size_t mark = arena.used();
    mixer.backward(mg, arena);
    arena.rewind(mark);
    // The input projections are adjacent: one GEMM for their weight gradients, one for the input's.
    sgemm(Trans::Yes, Trans::No, P, d, N, 1.f, g.dproj, P, a.xn1, d, 1.f, grad(L.q_proj), d);
    sgemm(Trans::No, Trans::No, N, d, P, 1.f, g.dproj, P, model.param(L.q_proj), d, 0.f, g.dxn, d);
    rmsnorm_backward(a.x_in, d, model.param(L.mixer_norm), a.rstd1, g.dxn, d, g.dx, d,
                     grad(L.mixer_norm), N, d);
  }
  // Embedding: scatter-add (sequential: tokens repeat).
  const float scale = static_cast<float>(c.embed_scale());
  float* dE = grad(w.embed);
  for (int64_t n = 0; n < N; ++n) {
    float* row = dE + static_cast<int64_t>(tokens[n]) * d;
    for (int64_t i = 0; i < d; ++i) row[i] += scale * g.dx[n * d + i];
  }
  return loss;
}

}  // namespace retnet
