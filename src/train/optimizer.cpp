#include "retnet/train/optimizer.h"

#include <cmath>

#include "retnet/core/error.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {

double learning_rate(const AdamWOptions& o, int64_t step) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double span = std::max<int64_t>(o.total_steps - o.warmup_steps, 1);
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

double clip_gradients(ParamBuffer& grads, double max_norm) {
  const int64_t n = static_cast<int64_t>(grads.size());
  const float* g = grads.data();
  static const auto sum_of_squares_kernel = RETNET_ISA_VARIANT(kernel_isa(), sum_of_squares);
  static const auto scale_kernel = RETNET_ISA_VARIANT(kernel_isa(), scale_in_place);
  const double norm = std::sqrt(sum_of_squares_kernel(g, n));
  if (max_norm > 0 && norm > max_norm)
    scale_kernel(grads.data(), n, static_cast<float>(max_norm / norm));
  return norm;
}

bool AdamW::decays(const ParamEntry& e) {
  // The model's layout says which tensors take decay: its matrices, not the norms, the
  // embeddings or (by their mixer's spec) a mixer's own tensors.
  return e.weight_decay;
}

AdamW::AdamW(const ParamLayout& layout, const AdamWOptions& options)
    : options_(options), m_(layout), v_(layout), decay_(layout.total_floats(), 0) {
  for (const auto& e : layout.entries())
    if (decays(e)) std::fill(decay_.begin() + e.offset, decay_.begin() + e.offset + e.numel, 1);
}

void AdamW::update(ParamBuffer& params, const ParamBuffer& grads, double lr) {
  RETNET_CHECK(params.size() == m_.size() && grads.size() == m_.size(),
               "optimizer state has {} floats, parameters {}, gradients {}", m_.size(),
               params.size(), grads.size());
  ++steps_;
  const auto& o = options_;
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(steps_));
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps), decay = static_cast<float>(lr * o.weight_decay);
  float* p = params.data();
  float* m = m_.data();
  float* v = v_.data();
  const float* g = grads.data();
  const int64_t n = static_cast<int64_t>(params.size());
  static const auto step_kernel = RETNET_ISA_VARIANT(kernel_isa(), adamw_step);
  step_kernel(p, m, v, g, decay_.data(), n, b1, b2, step_size, inv_sqrt_bc2, eps, decay);
}

}  // namespace retnet
