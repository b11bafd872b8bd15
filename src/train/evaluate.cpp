#include "retnet/train/evaluate.h"

#include <algorithm>
#include <vector>

#include "retnet/core/error.h"

namespace retnet {

Evaluation evaluate_windows(std::span<const int32_t> tokens, const EvalOptions& o,
                            int64_t min_rest, const WindowLoss& mean_loss) {
  RETNET_CHECK(tokens.size() >= 2, "evaluation needs at least 2 tokens, got {}", tokens.size());
  RETNET_CHECK(o.seq >= 1 && o.batch >= 1, "evaluation windows of {} tokens, {} per batch",
               o.seq, o.batch);
  const int64_t T = o.seq, B = o.batch;
  const int64_t predictions = static_cast<int64_t>(tokens.size()) - 1;
  int64_t windows = predictions / T;  // whole windows
  if (o.max_tokens > 0) windows = std::min(windows, std::max<int64_t>(1, o.max_tokens / T));
  std::vector<int32_t> in(static_cast<size_t>(B * T)), target(static_cast<size_t>(B * T));
  Evaluation e;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    const int64_t rows = std::min(B, windows - w0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < T; ++t) {
        in[r * T + t] = tokens[(w0 + r) * T + t];
        target[r * T + t] = tokens[(w0 + r) * T + t + 1];
      }
    e.nats += mean_loss(in.data(), target.data(), rows, T) * rows * T;
    e.tokens += rows * T;
  }
  // The shorter last window, when the whole sequence is asked for (or no whole window fits).
  const int64_t rest = predictions - windows * T;
  if ((o.max_tokens == 0 || windows == 0) && rest > 0 && rest >= min_rest) {
    const int32_t* start = tokens.data() + windows * T;
    e.nats += mean_loss(start, start + 1, 1, rest) * rest;
    e.tokens += rest;
  }
  e.loss = e.nats / static_cast<double>(e.tokens);
  return e;
}

Evaluation evaluate(const Model& model, std::span<const int32_t> tokens, const EvalOptions& o,
                    Arena& arena) {
  return evaluate_windows(tokens, o, 1, [&](const int32_t* in, const int32_t* target,
                                            int64_t rows, int64_t T) {
    return loss_and_gradients(model, in, target, rows, T, o.form, arena, nullptr);
  });
}

}  // namespace retnet
