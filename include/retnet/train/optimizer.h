#pragma once
// AdamW (decoupled weight decay) over the flat parameter buffer, with its moments in buffers of
// the same layout; the warmup + cosine learning-rate schedule; global-norm gradient clipping.
#include <cstdint>
#include <vector>

#include "retnet/core/param_buffer.h"

namespace retnet {

struct AdamWOptions {
  double lr = 2e-3;            // peak learning rate
  double min_lr_ratio = 0.1;   // the cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 100;  // linear warmup from 0
  int64_t total_steps = 1000;  // end of the cosine
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;   // not applied to norms and embeddings
  double clip_norm = 1.0;      // global gradient norm limit (<= 0: no clipping)
};

// Learning rate at step (0-based): linear warmup, then cosine to lr * min_lr_ratio.
double learning_rate(const AdamWOptions& o, int64_t step);

// Global L2 norm of the gradients; scales them down to max_norm if above (max_norm > 0).
double clip_gradients(ParamBuffer& grads, double max_norm);

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWOptions& options);
  // One update with learning rate lr; the step counter (for bias correction) advances.
  void update(ParamBuffer& params, const ParamBuffer& grads, double lr);
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t s) { steps_ = s; }
  ParamBuffer& first_moment() { return m_; }
  ParamBuffer& second_moment() { return v_; }
  const AdamWOptions& options() const { return options_; }
  // Whether a parameter tensor gets weight decay: as the layout says (the model marks its
  // matrices except the embedding, not its norms nor a mixer's own tensors).
  static bool decays(const ParamEntry& e);

 private:
  AdamWOptions options_;
  ParamBuffer m_, v_;
  std::vector<uint8_t> decay_;  // per float: 1 where weight decay applies
  int64_t steps_ = 0;
};

}  // namespace retnet
