#pragma once
// Evaluation: the mean next-token loss of a model over a token sequence, in non-overlapping windows.
// The trainer's validation and `retnet eval` both use it.
#include <cstdint>
#include <functional>
#include <span>

#include "retnet/model/training.h"

namespace retnet {

struct EvalOptions {
  int64_t seq = 256;   // predictions per window
  int64_t batch = 8;   // windows per forward pass
  // At most this many predictions (whole windows, at least one); 0: every window, including the
  // shorter last one.
  int64_t max_tokens = 0;
  TrainingOptions form;  // the training form the loss is computed with (parallel or chunkwise)
};

struct Evaluation {
  double loss = 0;       // nats per predicted token
  double nats = 0;       // summed over the predictions
  int64_t tokens = 0;    // predictions made
};

// Predicts tokens[i + 1] from tokens[..i] over windows of `seq`; throws Error with fewer than 2.
Evaluation evaluate(const Model& model, std::span<const int32_t> tokens, const EvalOptions& options,
                    Arena& arena);

// The loss of `rows` windows of T tokens (inputs and targets [rows, T], rows T apart), as a mean
// over their predictions.
using WindowLoss =
    std::function<double(const int32_t* in, const int32_t* target, int64_t rows, int64_t T)>;
// evaluate()'s walk over the windows with any loss: batches of whole windows, then the shorter
// last one (when every window is asked for, or none fits) if it has at least `min_rest` tokens.
Evaluation evaluate_windows(std::span<const int32_t> tokens, const EvalOptions& options,
                            int64_t min_rest, const WindowLoss& mean_loss);

}  // namespace retnet
