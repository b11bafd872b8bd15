#include "retnet/model/training.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layer_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/slice_link.h"
#include "retnet/ops/cross_entropy.h"
#include "retnet/ops/rmsnorm.h"

namespace retnet {
namespace {

int64_t chunk_of(const Config& c, const TrainingOptions& o) {
  return o.chunk > 0 ? o.chunk : c.recurrent_chunk_size;
}

// Scratch of the loss: d x of the last block's output, d xn of the final norm's, a block of logits.
struct LossScratch {
  float* dx;      // [N, d]
  float* dxn;     // [N, d]
  float* logits;  // [kCrossEntropyBlock, V]
};

size_t loss_scratch_floats(const Config& c, int64_t N) {
  return 2 * Arena::footprint(static_cast<size_t>(N * c.embed_dim)) +
         Arena::footprint(static_cast<size_t>(kCrossEntropyBlock * c.vocab_size));
}

LossScratch allocate_loss_scratch(Arena& arena, const Config& c, int64_t N) {
  LossScratch g;
  g.dx = arena.alloc(static_cast<size_t>(N * c.embed_dim));
  g.dxn = arena.alloc(static_cast<size_t>(N * c.embed_dim));
  g.logits = arena.alloc(static_cast<size_t>(kCrossEntropyBlock * c.vocab_size));
  return g;
}

// Floats of the link's buffers in a layer's forward or backward (the summary or the state's
// gradient, and the decays), for the largest layer state.
size_t link_floats(const Config& c, int64_t B) {
  int64_t largest = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    if (lc.mixer->state_floats_per_layer)
      largest = std::max(largest, lc.mixer->state_floats_per_layer(lc));
  }
  return 2 * Arena::footprint(static_cast<size_t>(B * largest));
}

}  // namespace

void check_slices_supported(const Config& c) {
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    RETNET_CHECK(lc.mixer->state_floats_per_layer && !lc.mixer->keeps_tokens &&
                     detail::layer_mixer(lc).joins_slices(),
                 "sequence parallel training needs a mixer with a constant-size state in every "
                 "layer; layer {} uses '{}', which {}",
                 l, lc.mixer->name,
                 lc.mixer->keeps_tokens ? "keeps every earlier token"
                                        : "does not pass its state between slices yet");
  }
}

size_t training_workspace_floats(const Config& c, int64_t B, int64_t T, const TrainingOptions& o) {
  const int64_t N = B * T;
  size_t mixer = 0;  // the largest layer's scratch, forward or backward
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    const detail::LayerMixer& m = detail::layer_mixer(lc);
    mixer = std::max({mixer, m.workspace_floats(lc, o.form, B, T, chunk_of(c, o), 0),
                      m.backward_workspace_floats(lc, o.form, B, T, chunk_of(c, o))});
    if (!c.hybrid()) break;
  }
  return detail::activation_floats(c, B, T, true) + loss_scratch_floats(c, N) +
         detail::backward_layers_scratch_floats(c, N) +
         Arena::footprint(static_cast<size_t>(B * c.state_floats_per_sequence())) + mixer +
         (o.link ? link_floats(c, B) + Arena::footprint(static_cast<size_t>(2 * B)) : 0);
}

double loss_and_gradients(const Model& model, const int32_t* tokens, const int32_t* targets,
                          int64_t B, int64_t T, const TrainingOptions& o, Arena& arena,
                          ParamBuffer* grads) {
  const Config& c = model.config();
  RETNET_CHECK(o.form == Form::Parallel || o.form == Form::Chunkwise,
               "training runs the parallel or the chunkwise form, not {}",
               form_name(o.form));
  RETNET_CHECK(c.trains_with(o.form), "the {} mixer has no {} form to train with",
               c.mixer_description(), form_name(o.form));
  RETNET_CHECK(B >= 1 && T >= 1, "a training batch needs B >= 1 and T >= 1");
  const int64_t N = B * T, d = c.embed_dim;
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
  LossScratch g = allocate_loss_scratch(arena, c, N);
  // The chunkwise form carries a state across chunks: a fresh one per pass.
  float* state = nullptr;
  if (o.form == Form::Chunkwise) {
    state = arena.alloc(static_cast<size_t>(B * c.state_floats_per_sequence()));
    std::fill(state, state + B * c.state_floats_per_sequence(), 0.f);
  }
  // Whole sequences start at position 0 (no positions); a slice at o.position0.
  int64_t* positions = nullptr;
  if (o.link) {
    RETNET_CHECK(o.form == Form::Chunkwise,
                 "sequence parallel training runs the chunkwise form, not {}", form_name(o.form));
    RETNET_CHECK(o.position0 >= 0, "a slice's first position must be >= 0, got {}", o.position0);
    check_slices_supported(c);
    // Arena floats are 4 bytes and 64-byte aligned: 2 B floats hold B positions.
    positions = reinterpret_cast<int64_t*>(arena.alloc(static_cast<size_t>(2 * B)));
    std::fill(positions, positions + B, o.position0);
  }
  const StateView view{state, positions, B, c.state_floats_per_sequence(), nullptr, 0};
  detail::run_layers(model, tokens, B, T, nullptr, o.form, chunk, 0, arena, &view, acts, o.link);
  const ModelTensors& w = model.tensors();
  if (!grads && !model.weights_complete()) {  // inference weights: the head's packed copy
    const HeadProduct head = [&](const float* xn, int64_t R, float* logits) {
      detail::project(model, w.output_projection, R, c.vocab_size, d, xn, d, false, logits,
                      c.vocab_size);
    };
    return cross_entropy_with_head(acts.xn_f, head, targets, N, T, d, c.vocab_size, g.logits);
  }
  const float* head = model.param(w.output_projection);
  if (!grads)
    return cross_entropy_with_head(acts.xn_f, head, targets, N, T, d, c.vocab_size, g.logits,
                                   nullptr, nullptr);

  auto grad = [&](size_t index) { return grads->tensor(index); };
  const double loss = cross_entropy_with_head(acts.xn_f, head, targets, N, T, d, c.vocab_size,
                                              g.logits, g.dxn, grad(w.output_projection),
                                              o.grad_tokens);
  std::fill(g.dx, g.dx + N * d, 0.f);
  rmsnorm_backward(acts.x, d, model.param(w.final_norm), acts.rstd_f, g.dxn, d, g.dx, d,
                   grad(w.final_norm), N, d);
  // The final norm and, untied, the head lie at the end of the layout (a tied head's gradient is
  // the embedding's, final only after the layers).
  if (o.gradients_ready) o.gradients_ready(grads->layout()[w.final_norm].offset, grads->size());

  detail::backward_layers(model, tokens, B, T, o.form, chunk, arena, acts, g.dx, *grads, positions,
                          o.link, &o.gradients_ready, &o.backward_tick);
  return loss;
}

}  // namespace retnet
