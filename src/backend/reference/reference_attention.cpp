// The reference backend's softmax attention (the block of
// src/mixers/attention/attention_block.cpp): per token q, k and v plus their biases (qkv_bias),
// q and k rotated; each kv head's keys and values appended to the sequence's cached tokens (a row
// of [kv heads, d_k] keys then [kv heads, d_v] values, each kv head once for its group of query
// heads); per query head attention_reference over every token up to its own (the window's last
// tokens only, with a sliding window), reading kv head h / groups.
#include "../../mixers/attention/attention_options.h"
#include "reference_mixers.h"
#include "retnet/mixers/attention.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::detail::reference {

const float* attention_forward(const MixerPass& p) {
  const Model& model = *p.model;
  const Config& c = model.layer_config(p.layer);
  const int64_t B = p.B, T = p.T, H = c.heads, dk = c.key_dim(), dv = c.head_value_dim();
  const int64_t Hkv = c.kv_head_count(), G = c.kv_groups(), vd = c.value_embed_dim;
  const int64_t P = c.projection_width(), dq = c.qk_width(), dkv = c.k_width(), vkv = c.v_width();
  const int64_t row_floats = dkv + vkv;
  const int64_t window = mixer_options<AttentionOptions>(c).window_size;
  // The q, k and v biases (the attention options' own tensors, in its spec's order), or none.
  const LayerTensors& L = model.tensors().layers[p.layer];
  const bool biased = L.mixer_tensors[0] != kNoTensor;
  const float* q_bias = biased ? model.param(L.mixer_tensors[0]) : nullptr;
  const float* k_bias = biased ? model.param(L.mixer_tensors[1]) : nullptr;
  const float* v_bias = biased ? model.param(L.mixer_tensors[2]) : nullptr;

  std::vector<double> q(T * dq), k(dkv);
  std::vector<float> cached(row_floats), qh(T * dk), kh, vh;
  std::vector<double> oh(T * dv);
  for (int64_t b = 0; b < B; ++b) {
    SequenceTokens tokens(p, b, row_floats);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = p.proj + (b * T + t) * P;
      for (int64_t i = 0; i < dq; ++i) q[t * dq + i] = double(row[i]) + (biased ? q_bias[i] : 0.0);
      for (int64_t i = 0; i < dkv; ++i) k[i] = double(row[dq + i]) + (biased ? k_bias[i] : 0.0);
      rotate(p, q.data() + t * dq, H, dk, b, t);
      rotate(p, k.data(), Hkv, dk, b, t);
      for (int64_t i = 0; i < dkv; ++i) cached[i] = static_cast<float>(k[i]);
      for (int64_t i = 0; i < vkv; ++i)
        cached[dkv + i] =
            static_cast<float>(double(row[dq + dkv + i]) + (biased ? v_bias[i] : 0.0));
      tokens.set(t, cached);
    }
    const int64_t seen = tokens.past() + T;
    kh.resize(static_cast<size_t>(seen * dk));
    vh.resize(static_cast<size_t>(seen * dv));
    for (int64_t h = 0; h < H; ++h) {
      const int64_t j = h / G;  // the kv head
      for (int64_t n = 0; n < seen; ++n) {
        const float* row = tokens.row(n);
        for (int64_t i = 0; i < dk; ++i) kh[n * dk + i] = row[j * dk + i];
        for (int64_t i = 0; i < dv; ++i) vh[n * dv + i] = row[dkv + j * dv + i];
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < dk; ++i)
          qh[t * dk + i] = static_cast<float>(q[t * dq + h * dk + i]);
      attention_reference(qh.data(), kh.data(), vh.data(), oh.data(), T, dk, dv, nullptr, window,
                          tokens.past());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < dv; ++i)
          p.out[(b * T + t) * vd + h * dv + i] = static_cast<float>(oh[t * dv + i]);
    }
  }
  return p.out;
}

}  // namespace retnet::detail::reference
