// The facade's whole-sequence computations (include/retnet/retnet.h) over the model layer.
#include "retnet/core/arena.h"
#include "retnet/model/forward.h"
#include "retnet/model/training.h"
#include "retnet/retnet.h"

namespace retnet {
namespace {

int64_t sequence_length(size_t tokens, int64_t batch) {
  RETNET_CHECK(batch >= 1 && tokens > 0 && tokens % static_cast<size_t>(batch) == 0,
               "{} tokens do not form {} sequences of equal length", tokens, batch);
  return static_cast<int64_t>(tokens) / batch;
}

}  // namespace

ModelRunner::ModelRunner(const Model& model) : model_(model), arena_(std::make_unique<Arena>()) {}
ModelRunner::~ModelRunner() = default;

void ModelRunner::logits(std::span<const int32_t> tokens, int64_t batch, float* out, Form form,
                         int64_t chunk) {
  const int64_t T = sequence_length(tokens.size(), batch);
  ForwardOptions o;
  o.form = form;
  o.chunk = chunk;
  forward_logits(model_, tokens.data(), batch, T, out, o, *arena_);
}

std::vector<float> ModelRunner::logits(std::span<const int32_t> tokens, int64_t batch, Form form,
                                       int64_t chunk) {
  std::vector<float> out(tokens.size() * static_cast<size_t>(model_.config().vocab_size));
  logits(tokens, batch, out.data(), form, chunk);
  return out;
}

double ModelRunner::loss(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                         int64_t batch, Form form, int64_t chunk, ParamBuffer* grads) {
  const int64_t T = sequence_length(inputs.size(), batch);
  RETNET_CHECK(targets.size() == inputs.size(), "{} targets for {} inputs", targets.size(),
               inputs.size());
  TrainingOptions o;
  o.form = form;
  o.chunk = chunk;
  return loss_and_gradients(model_, inputs.data(), targets.data(), batch, T, o, *arena_, grads);
}

Evaluation ModelRunner::evaluate(std::span<const int32_t> tokens, const EvalOptions& options) {
  return retnet::evaluate(model_, tokens, options, *arena_);
}

}  // namespace retnet
