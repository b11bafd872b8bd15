// The backward layer loop (training): the blocks in reverse, then the embedding, accumulating
// every parameter's gradient. Beside it, layer_forward.cpp is the forward it differentiates.
#include <cstring>

#include "layer_loop.h"
#include "retnet/core/gemm.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {
namespace {

// Scratch of the backward pass, beyond the saved activations and d x.
struct GradScratch {
  float* dxn;    // [N, d]
  float* dproj;  // [N, P]
  float* dgo;    // [N, vd] gradient of the mixer's output
  float* go;     // [N, vd] the mixer's output (recomputed by some mixers)
  float* dffn;   // [N, 2F]
  float* dh;     // [N, F]
};

GradScratch allocate_grad_scratch(Arena& arena, const Config& c, int64_t N) {
  const size_t d = c.embed_dim, vd = c.max_value_dim(), P = c.max_projection_width();
  const size_t F = c.ffn_dim;
  GradScratch g;
  g.dxn = arena.alloc(N * d);
  g.dproj = arena.alloc(N * P);
  g.dgo = arena.alloc(N * vd);
  g.go = arena.alloc(N * vd);
  g.dffn = arena.alloc(N * 2 * F);
  g.dh = arena.alloc(N * F);
  return g;
}

}  // namespace

size_t backward_layers_scratch_floats(const Config& c, int64_t N) {
  const size_t d = c.embed_dim, vd = c.max_value_dim(), P = c.max_projection_width();
  const size_t F = c.ffn_dim;
  auto fp = [](size_t n) { return Arena::footprint(n); };
  return fp(N * d) + fp(N * P) + 2 * fp(N * vd) + fp(N * 2 * F) + fp(N * F);
}

void backward_layers(const Model& model, const int32_t* tokens, int64_t B, int64_t T, Form form,
                     int64_t chunk, Arena& arena, const Activations& acts, float* dx,
                     ParamBuffer& grads, const int64_t* positions, SliceLink* link,
                     const std::function<void(size_t, size_t)>* gradients_ready,
                     const std::function<void()>* tick) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t N = B * T, d = c.embed_dim, F = c.ffn_dim;
  auto grad = [&](size_t index) { return grads.tensor(index); };
  GradScratch g = allocate_grad_scratch(arena, c, N);
  // Layer l's tensors fill [its first tensor, the next layer's first tensor) of the layout, the
  // last layer's up to the final norm; the embedding comes before layer 0. Within a layer the
  // mixer's tensors come first, then the FFN's (fc1 to final_layer_norm): each part is reported as
  // soon as its backward is done.
  auto offset = [&](size_t index) { return grads.layout()[index].offset; };
  auto layer_begin = [&](int64_t l) {
    return l < c.layers ? offset(w.layers[l].q_proj) : offset(w.final_norm);
  };
  auto report = [&](size_t begin, size_t end) {
    if (gradients_ready && *gradients_ready && begin < end) (*gradients_ready)(begin, end);
  };
  auto between_ops = [&] {
    if (tick && *tick) (*tick)();
  };
  // The rotation table the forward left: the last rotating layer's; recomputed (at the forward's
  // positions) where a hybrid model's layers rotate by other tables.
  const std::vector<double>* table_thetas = nullptr;
  for (int64_t l = 0; l < c.layers; ++l)
    if (model.layer_config(l).mixer->rotates) table_thetas = &model.layer_thetas(l);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const LayerTensors& L = w.layers[l];
    const Config& lc = model.layer_config(l);
    const int64_t vd = lc.value_embed_dim, P = lc.projection_width();
    if (lc.mixer->rotates && table_thetas != &model.layer_thetas(l)) {
      table_thetas = &model.layer_thetas(l);
      rotation_table(*table_thetas, B, T, positions, acts.rotation);
    }
    const LayerActivations& a = acts.layers[l];
    // FFN: x_out = x_mid + fc2(h), h = act(fc1 xn2) * gate xn2.
    sgemm(Trans::No, Trans::No, N, F, d, 1.f, dx, d, model.param(L.fc2), F, 0.f, g.dh, F);
    sgemm(Trans::Yes, Trans::No, d, F, N, 1.f, dx, d, a.h, a.ld_h, 1.f, grad(L.fc2), F);
    between_ops();
    gated_activation_backward(c.activation, a.ffn, 2 * F, a.ffn + F, 2 * F, g.dh, F, g.dffn, 2 * F,
                              g.dffn + F, 2 * F, N, F);
    // fc1 and gate are adjacent: one GEMM for both weight gradients, one for the input gradient.
    sgemm(Trans::Yes, Trans::No, 2 * F, d, N, 1.f, g.dffn, 2 * F, a.xn2, d, 1.f, grad(L.fc1), d);
    between_ops();
    sgemm(Trans::No, Trans::No, N, d, 2 * F, 1.f, g.dffn, 2 * F, model.param(L.fc1), d, 0.f, g.dxn,
          d);
    rmsnorm_backward(a.x_mid, d, model.param(L.final_norm), a.rstd2, g.dxn, d, dx, d,
                     grad(L.final_norm), N, d);
    report(offset(L.fc1), layer_begin(l + 1));

    // Mixer: x_mid = x_in + out_proj(mixer(proj)).
    MixerGrad mg{.model = &model, .layer = l, .B = B, .T = T, .form = form, .chunk = chunk,
                 .proj = a.proj, .saved = a.saved, .rotation = acts.rotation, .d_out = g.dgo,
                 .d_proj = g.dproj};
    mg.grads = &grads;
    mg.link = link;
    const LayerMixer& mixer = layer_mixer(lc);
    const float* go = mixer.output(mg, g.go);
    between_ops();
    sgemm(Trans::Yes, Trans::No, d, vd, N, 1.f, dx, d, go, vd, 1.f, grad(L.out_proj), vd);
    between_ops();
    sgemm(Trans::No, Trans::No, N, vd, d, 1.f, dx, d, model.param(L.out_proj), vd, 0.f, g.dgo,
          vd);
    const size_t mark = arena.used();
    mixer.backward(mg, arena);
    arena.rewind(mark);
    between_ops();
    // The input projections are adjacent: one GEMM for their weight gradients, one for the input's.
    sgemm(Trans::Yes, Trans::No, P, d, N, 1.f, g.dproj, P, a.xn1, d, 1.f, grad(L.q_proj), d);
    between_ops();
    sgemm(Trans::No, Trans::No, N, d, P, 1.f, g.dproj, P, model.param(L.q_proj), d, 0.f, g.dxn, d);
    rmsnorm_backward(a.x_in, d, model.param(L.mixer_norm), a.rstd1, g.dxn, d, dx, d,
                     grad(L.mixer_norm), N, d);
    report(layer_begin(l), offset(L.fc1));
  }
  // Embedding: scatter-add (sequential: tokens repeat).
  const float scale = static_cast<float>(c.embed_scale());
  float* dE = grad(w.embed);
  for (int64_t n = 0; n < N; ++n) {
    float* row = dE + static_cast<int64_t>(tokens[n]) * d;
    for (int64_t i = 0; i < d; ++i) row[i] += scale * dx[n * d + i];
  }
  report(0, layer_begin(0));
}

}  // namespace retnet::detail
