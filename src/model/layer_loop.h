#pragma once
// Internal to src/model: the layer loops. The forward loop (layer_forward.cpp) is shared by
// inference (forward.cpp) and training (training.cpp); the backward loop (layer_backward.cpp)
// reads what a training forward saved. Inference reuses one set of buffers for every layer and
// works in place; training gives every layer its own buffers, which the backward pass reads.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "retnet/backend/cpu_kernels.h"
#include "retnet/core/arena.h"
#include "retnet/core/param_buffer.h"
#include "retnet/model/forward.h"
#include "retnet/model/model.h"
#include "retnet/model/slice_link.h"
#include "retnet/model/state.h"

namespace retnet::detail {

struct LayerActivations {
  float* x_in = nullptr;   // [N, d] residual stream entering the layer (training only)
  float* rstd1 = nullptr;  // [N] (training only)
  float* xn1 = nullptr;    // [N, d]
  float* proj = nullptr;   // [N, P]: the mixer's input projection (q | k | v (| g))
  float* saved = nullptr;  // what the mixer saves for its backward pass (training only)
  float* x_mid = nullptr;  // [N, d] residual after the mixer sub-layer (training only)
  float* rstd2 = nullptr;  // [N] (training only)
  float* xn2 = nullptr;    // [N, d]
  float* ffn = nullptr;    // [N, 2F]: fc1 | gate, before the activation
  float* h = nullptr;      // gated product; inference: the fc1 half of ffn (row stride 2F)
  int64_t ld_h = 0;
};

struct Activations {
  std::vector<LayerActivations> layers;  // one per layer (training); empty for inference, which
  LayerActivations shared;               // reuses these for every layer (no allocation per step)
  float* x = nullptr;        // [N, d] residual stream; after the pass: the final layer's output
  float* go = nullptr;       // [N, vd] mixer output scratch
  float* rotation = nullptr;  // the pass's rotation table (rotation_table)
  float* rstd_f = nullptr;   // [N] final norm (training only)
  float* xn_f = nullptr;     // [N, d] final normed features
};

// The form layer `layer` of a pass in `form` runs: a hybrid model's constant-state layers continue
// their state in the chunkwise form where the pass is parallel with a state (a prefill after
// which its attention layers' caches and their states are both filled).
Form layer_form(const Config& model_config, const Config& layer, Form form, bool has_state);

// Floats the activations take, and their allocation from the arena.
size_t activation_floats(const Config& c, int64_t B, int64_t T, bool training);
Activations allocate_activations(Arena& arena, const Config& c, int64_t B, int64_t T,
                                 bool training);

// Embedding, all layers and the final norm over B x T tokens; logits [N, vocab] if non-null. An
// inference pass runs on the model's backend, a training pass (acts with a layer each) on the CPU.
// `state` is the sequences' state (nullptr: from empty sequences without one, training's parallel
// form). `link`: the tokens are a slice of longer sequences (sequence parallel training).
void run_layers(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                Form form, int64_t chunk, int64_t scan_tile, Arena& arena, const StateView* state,
                Activations& acts, SliceLink* link = nullptr);

// The backward of run_layers' blocks and embedding (training): from d loss / d x of the last
// block's output in `dx` [N, d] (overwritten), accumulates every parameter's gradient into grads.
size_t backward_layers_scratch_floats(const Config& c, int64_t N);
// `positions` and `link` as the forward's (nullptr: whole sequences from position 0).
void backward_layers(const Model& model, const int32_t* tokens, int64_t B, int64_t T, Form form,
                     int64_t chunk, Arena& arena, const Activations& acts, float* dx,
                     ParamBuffer& grads, const int64_t* positions = nullptr,
                     SliceLink* link = nullptr,
                     const std::function<void(size_t, size_t)>* gradients_ready = nullptr,
                     const std::function<void()>* tick = nullptr);

}  // namespace retnet::detail
