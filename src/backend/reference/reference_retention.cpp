// The reference backend's retention (the block of src/mixers/retention/retention_block.cpp, from
// its definition): per token the feature map of q and k, k scaled by 1 / sqrt(d_k), both rotated;
// per head retention_reference's recurrence from the head's state (query head h reading kv head
// h / groups), its own decay and the token's absolute position; then the head norm (RMSNorm over
// each head's d_v values, times the weight if any) and the swish gate if the layer has one.
#include <cmath>

#include "reference_mixers.h"
#include "retnet/mixers/retention.h"

namespace retnet::detail::reference {
namespace {

// fla's elementwise feature map of retention's queries and keys.
double qk_feature(QkFeatureMap f, double x) {
  switch (f) {
    case QkFeatureMap::None:
      return x;
    case QkFeatureMap::Relu:
      return x > 0 ? x : 0.0;
    case QkFeatureMap::Relu2:
      return x > 0 ? x * x : 0.0;
    case QkFeatureMap::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case QkFeatureMap::Tanh:
      return std::tanh(x);
    case QkFeatureMap::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case QkFeatureMap::Swish:
      return x / (1.0 + std::exp(-x));
  }
  RETNET_CHECK(false, "unknown retention feature map {}", static_cast<int>(f));
  return x;
}

}  // namespace

const float* retention_forward(const MixerPass& p) {
  const Model& model = *p.model;
  const Config& c = model.layer_config(p.layer);
  const int64_t B = p.B, T = p.T, H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
  const int64_t Hkv = c.kv_head_count(), G = c.kv_groups(), vd = c.value_embed_dim;
  const int64_t P = c.projection_width(), d = c.qk_width(), dkv = c.k_width(), vkv = c.v_width();
  const int64_t head_state = retention_state_floats_per_head(dk, dv);
  const double key_scale = 1.0 / std::sqrt(static_cast<double>(dk));
  const size_t norm_index = model.tensors().layers[p.layer].mixer_tensors[0];
  const float* norm_weight = norm_index == kNoTensor ? nullptr : model.param(norm_index);
  const auto& gammas = model.gammas();
  RETNET_CHECK(static_cast<int64_t>(gammas.size()) >= H, "layer {} has {} heads but {} decays",
               p.layer, H, gammas.size());

  std::vector<double> q(T * H * dk), k(T * Hkv * dk), v(T * Hkv * dv), o(T * vd);
  std::vector<double> qh(T * dk), kh(T * dk), vh(T * dv), oh(T * dv), state(head_state);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* row = p.proj + (b * T + t) * P;
      for (int64_t i = 0; i < d; ++i) q[t * d + i] = qk_feature(c.feature_map, row[i]);
      for (int64_t i = 0; i < dkv; ++i)
        k[t * dkv + i] = qk_feature(c.feature_map, row[d + i]) * key_scale;
      for (int64_t i = 0; i < vkv; ++i) v[t * vkv + i] = row[d + dkv + i];
      rotate(p, q.data() + t * d, H, dk, b, t);
      rotate(p, k.data() + t * dkv, Hkv, dk, b, t);
    }
    float* saved_state = sequence_state(p, b);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t j = h / G;  // the kv head
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < dk; ++i) {
          qh[t * dk + i] = q[t * d + h * dk + i];
          kh[t * dk + i] = k[t * dkv + j * dk + i];
        }
        for (int64_t i = 0; i < dv; ++i) vh[t * dv + i] = v[t * vkv + j * dv + i];
      }
      float* head = saved_state ? saved_state + h * head_state : nullptr;
      for (int64_t i = 0; i < head_state; ++i) state[i] = head ? head[i] : 0.0;
      retention_reference(qh.data(), kh.data(), vh.data(), oh.data(), T, dk, dv, gammas[h],
                          c.normalize_scores, state.data(), start_position(p, b));
      if (head)
        for (int64_t i = 0; i < head_state; ++i) head[i] = static_cast<float>(state[i]);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < dv; ++i) o[t * vd + h * dv + i] = oh[t * dv + i];
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* row = p.proj + (b * T + t) * P;
      float* out = p.out + (b * T + t) * vd;
      for (int64_t h = 0; h < H; ++h) {
        const double* x = o.data() + t * vd + h * dv;
        double ss = 0;
        for (int64_t i = 0; i < dv; ++i) ss += x[i] * x[i];
        const double r = 1.0 / std::sqrt(ss / static_cast<double>(dv) + c.layernorm_eps);
        for (int64_t i = 0; i < dv; ++i) {
          double y = x[i] * r * (norm_weight ? norm_weight[i] : 1.0);
          if (c.gated()) {
            const double g = row[d + dkv + vkv + h * dv + i];
            y *= g / (1.0 + std::exp(-g));
          }
          out[h * dv + i] = static_cast<float>(y);
        }
      }
    }
  }
  return p.out;
}

}  // namespace retnet::detail::reference
