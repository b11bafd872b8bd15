#pragma once
// The training pass: a forward that keeps what the backward needs, the cross-entropy loss fused
// with the LM head (the [B*T, vocab] logits are never stored whole), and the backward pass of
// every op, accumulating into a gradient buffer with the parameters' layout.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "retnet/core/form.h"
#include "retnet/core/param_buffer.h"
#include "retnet/model/model.h"

namespace retnet {

class Arena;      // core/arena.h: scratch memory, sized by training_workspace_floats
class SliceLink;  // model/slice_link.h: sequence parallel

struct TrainingOptions {
  Form form = Form::Parallel;  // parallel or chunkwise
  int64_t chunk = 0;                             // chunkwise: 0 = the config's recurrent_chunk_size
  // Sequence parallel (chunkwise form, constant-state mixers only): the pass's T tokens are one
  // slice of longer sequences, starting at position `position0`; `link` joins it to the other
  // slices, and the gradient is the mean over `grad_tokens` tokens (all slices' B x T), so the
  // slices' gradients add up to the whole sequences'. nullptr: whole sequences.
  SliceLink* link = nullptr;
  int64_t position0 = 0;
  int64_t grad_tokens = 0;
  // Called during the backward pass with each range [begin, end) of the gradient buffer (floats
  // from its start) that the pass will not change again: the head and final norm, then each layer
  // from the last, then the embedding. Data parallel starts reducing them while the pass goes on.
  std::function<void(size_t begin, size_t end)> gradients_ready;
  // Called between the backward pass's large operations (a few times per layer), so that the
  // caller can keep work of its own going: data parallel lets its reductions advance there.
  std::function<void()> backward_tick;
};

// Throws Error naming the first mixer of the config that cannot train on slices of a sequence
// (one without a constant-size state, e.g. attention or AFT-full).
void check_slices_supported(const Config& config);

// Arena floats one training pass of B x T tokens needs.
size_t training_workspace_floats(const Config& config, int64_t B, int64_t T,
                                 const TrainingOptions& options);

// Mean cross-entropy (nats per token) of targets [B, T] given tokens [B, T]. With grads non-null,
// also accumulates (+=) d loss / d parameters into grads (the model's layout).
double loss_and_gradients(const Model& model, const int32_t* tokens, const int32_t* targets,
                          int64_t B, int64_t T, const TrainingOptions& options, Arena& arena,
                          ParamBuffer* grads);

}  // namespace retnet
