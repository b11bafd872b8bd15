// The reference backend's channel-wise decay attention (RWKV, with its decay rates
// exp(time_decay) and bonus time_first; AFT-simple, with neither; the block of
// src/mixers/shared/decay_block.cpp): per sequence decay_attention_reference's direct sums from
// the state (a, b, p) per channel, which it leaves holding the state after the pass.
#include <cmath>

#include "reference_mixers.h"
#include "retnet/mixers/decay_attention.h"

namespace retnet::detail::reference {

const float* decay_forward(const MixerPass& p) {
  const Model& model = *p.model;
  const Config& c = model.layer_config(p.layer);
  const int64_t B = p.B, T = p.T, C = c.value_embed_dim, S = decay_attention_state_floats(C);
  // w and u: RWKV's own tensors time_decay and time_first, in its spec's order; zero otherwise.
  std::vector<float> w(C, 0.f), u(C, 0.f);
  if (c.mixer == &rwkv_mixer_spec()) {
    const LayerTensors& L = model.tensors().layers[p.layer];
    const float* decay = model.param(L.mixer_tensors[0]);
    const float* first = model.param(L.mixer_tensors[1]);
    for (int64_t i = 0; i < C; ++i) {
      w[i] = static_cast<float>(std::exp(double(decay[i])));
      u[i] = first[i];
    }
  }
  std::vector<float> r(T * C), k(T * C), v(T * C);
  std::vector<double> o(T * C), start(S), end(S);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* row = p.proj + (b * T + t) * 3 * C;  // r (or q) | k | v
      for (int64_t i = 0; i < C; ++i) {
        r[t * C + i] = row[i];
        k[t * C + i] = row[C + i];
        v[t * C + i] = row[2 * C + i];
      }
    }
    float* state = sequence_state(p, b);
    for (int64_t i = 0; i < S; ++i) start[i] = state ? state[i] : 0.0;
    decay_attention_reference(r.data(), k.data(), v.data(), w.data(), u.data(), o.data(), T, C,
                              start.data(), end.data());
    if (state)
      for (int64_t i = 0; i < S; ++i) state[i] = static_cast<float>(end[i]);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i) p.out[(b * T + t) * C + i] = static_cast<float>(o[t * C + i]);
  }
  return p.out;
}

}  // namespace retnet::detail::reference
