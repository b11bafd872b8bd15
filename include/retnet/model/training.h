#pragma once
// The training pass: a forward that keeps what the backward needs, the cross-entropy loss fused
// with the LM head (the [B*T, vocab] logits are never stored whole), and the backward pass of
// every op, accumulating into a gradient buffer with the parameters' layout.
#include <cstdint>

#include "retnet/core/form.h"
#include "retnet/core/param_buffer.h"
#include "retnet/model/model.h"

namespace retnet {

class Arena;  // core/arena.h: scratch memory, sized by training_workspace_floats

struct TrainingOptions {
  Form form = Form::Parallel;  // parallel or chunkwise
  int64_t chunk = 0;                             // chunkwise: 0 = the config's recurrent_chunk_size
};

// Arena floats one training pass of B x T tokens needs.
size_t training_workspace_floats(const Config& config, int64_t B, int64_t T,
                                 const TrainingOptions& options);

// Mean cross-entropy (nats per token) of targets [B, T] given tokens [B, T]. With grads non-null,
// also accumulates (+=) d loss / d parameters into grads (the model's layout).
double loss_and_gradients(const Model& model, const int32_t* tokens, const int32_t* targets,
                          int64_t B, int64_t T, const TrainingOptions& options, Arena& arena,
                          ParamBuffer* grads);

}  // namespace retnet
