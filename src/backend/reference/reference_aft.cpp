// The reference backend's AFT-full (the block of src/mixers/aft/aft_block.cpp): each token's k
// and v appended to the sequence's cached tokens (a row of k [vd] then v [vd]); per sequence
// aft_reference over every token up to each query's own, with the layer's position biases.
#include "../../mixers/aft/aft_options.h"
#include "reference_mixers.h"
#include "retnet/mixers/aft.h"

namespace retnet::detail::reference {

const float* aft_forward(const MixerPass& p) {
  const Model& model = *p.model;
  const Config& c = model.layer_config(p.layer);
  const int64_t B = p.B, T = p.T, C = c.value_embed_dim;
  // pos_bias, the layer's own tensor.
  const float* bias = model.param(model.tensors().layers[p.layer].mixer_tensors[0]);
  const int64_t L = aft_max_distance(c);
  std::vector<float> q(T * C), k, v, cached(2 * C);
  std::vector<double> o(T * C);
  for (int64_t b = 0; b < B; ++b) {
    SequenceTokens tokens(p, b, 2 * C);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = p.proj + (b * T + t) * 3 * C;  // q | k | v
      for (int64_t i = 0; i < C; ++i) q[t * C + i] = row[i];
      for (int64_t i = 0; i < 2 * C; ++i) cached[i] = row[C + i];
      tokens.set(t, cached);
    }
    const int64_t seen = tokens.past() + T;
    k.resize(static_cast<size_t>(seen * C));
    v.resize(static_cast<size_t>(seen * C));
    for (int64_t n = 0; n < seen; ++n)
      for (int64_t i = 0; i < C; ++i) {
        k[n * C + i] = tokens.row(n)[i];
        v[n * C + i] = tokens.row(n)[C + i];
      }
    aft_reference(q.data(), k.data(), v.data(), bias, L, o.data(), T, C, tokens.past());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i) p.out[(b * T + t) * C + i] = static_cast<float>(o[t * C + i]);
  }
  return p.out;
}

}  // namespace retnet::detail::reference
