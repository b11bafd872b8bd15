// The attention-free transformer (AFT-full) as a block's mixer: per channel, a softmax over the
// earlier tokens of exp(pos_bias[distance] + k), weighting v, gated by sigmoid(q):
//   out = sigmoid(q) * sum_m exp(w_nm + k_m) v_m / sum_m exp(w_nm + k_m)
// Projections q | k | v, each of width vd; pos_bias [aft_max_distance] per layer. Decoding keeps
// every key and value in the state's token cache (rows of k [vd] then v [vd], the kernel's layout).
#include <algorithm>
#include <cmath>

#include "aft_options.h"
#include "retnet/mixers/aft.h"
#include "retnet/model/mixer_layer.h"

namespace retnet::detail {
namespace {

// The layer's own tensors, in the spec's order.
constexpr size_t kPositionBias = 0;  // pos_bias [aft_max_distance]: w_nm = pos_bias[n - m]

// Saved per token and channel: the softmax's running maximum, its denominator and the ratio
// (numerator / denominator), in this order.
SavedSizes<3> saved_sizes(const Config& c, int64_t N) {
  const size_t n = static_cast<size_t>(N * c.value_embed_dim);
  return {n, n, n};
}
struct Saved {
  float *row_max, *denominator, *ratio;
};
Saved carve(const float* base, const Config& c, int64_t N) {
  const auto [row_max, denominator, ratio] = carve_saved(base, saved_sizes(c, N));
  return {row_max, denominator, ratio};
}

class AftMixer final : public SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config& c, Form form, int64_t B, int64_t, int64_t,
                          int64_t) const override {
    const size_t lengths = cache_lengths_floats(B);
    if (form == Form::Recurrent)
      return lengths + aft_step_workspace_floats(B, c.value_embed_dim);
    return lengths + aft_workspace_floats(kAftDefaultTile);
  }

  size_t backward_workspace_floats(const Config& c, Form, int64_t, int64_t,
                                   int64_t) const override {
    return aft_backward_workspace_floats(aft_max_distance(c), kAftDefaultTile);
  }

  const float* forward(const MixerPass& p, Arena& arena) const override {
    const Model& model = *p.model;
    const Config& c = model.layer_config(p.layer);
    const int64_t B = p.B, T = p.T, vd = c.value_embed_dim;
    const float* bias = model.param(model.tensors().layers[p.layer].mixer_tensors[kPositionBias]);
    const int64_t L = aft_max_distance(c);
    const auto [q, k, v] = channel_qkv(p.proj, B, T, vd);
    const TensorView out = channel_view(p.out, B, T, vd, vd);
    if (!p.cache) {  // from an empty sequence (training, or a parallel pass without a state)
      AftArgs a;
      a.q = q, a.k = k, a.v = v, a.out = out;
      a.bias = bias, a.L = L;
      if (p.saved) {
        const Saved sv = carve(p.saved, c, B * T);
        a.row_max = sv.row_max, a.denominator = sv.denominator, a.ratio = sv.ratio;
      }
      aft_forward(a, arena);
      return p.out;
    }
    AftCache cache = pass_cache<AftCache>(p, arena);
    if (is_decode_step(p))
      aft_step(q, k, v, out, cache, bias, L, arena);
    else
      aft_prefill(q, k, v, out, cache, bias, L, arena);
    return p.out;
  }

  const float* output(const MixerGrad& gr, float* scratch) const override {
    const Saved sv = carve(gr.saved, gr.model->layer_config(gr.layer), gr.B * gr.T);
    return sigmoid_gated_output(gr, sv.ratio, scratch);
  }

  void backward(const MixerGrad& gr, Arena& arena) const override {
    const Model& model = *gr.model;
    const Config& c = model.layer_config(gr.layer);
    const int64_t B = gr.B, T = gr.T, vd = c.value_embed_dim;
    const Saved sv = carve(gr.saved, c, B * T);
    const size_t bias_index = model.tensors().layers[gr.layer].mixer_tensors[kPositionBias];
    const ChannelGrad g = channel_grad(gr, vd);
    AftGradArgs ga;
    ga.q = g.x.q, ga.k = g.x.k, ga.v = g.x.v;
    ga.d_q = g.dx.q, ga.d_k = g.dx.k, ga.d_v = g.dx.v;
    ga.d_out = g.d_out;
    ga.bias = model.param(bias_index);
    ga.d_bias = gr.grads->tensor(bias_index);
    ga.L = aft_max_distance(c);
    ga.row_max = sv.row_max, ga.denominator = sv.denominator, ga.ratio = sv.ratio;
    aft_backward(ga, arena);
  }
};

std::vector<int64_t> position_bias_shape(const Config& c) { return {aft_max_distance(c)}; }
// Zero biases: at first every earlier token counts by its key alone.
void zero_init(const Config&, int64_t, uint64_t, float* w, int64_t n) { std::fill_n(w, n, 0.f); }

// Every token's keys and values, [vd] each.
int64_t aft_cache_floats(const Config& c) { return 2 * c.value_embed_dim; }

// Per channel and earlier token: an exponential, and multiply-adds into numerator and denominator.
double aft_core_flops(const Config& c, int64_t T, Form form, int64_t) {
  return 4.0 * mean_context(T, form) * static_cast<double>(c.value_embed_dim);
}

}  // namespace

const MixerSpec& aft_mixer_spec() {
  static const MixerSpec spec{.name = "aft",
                              .scope = "aft",
                              .summary = "AFT-full: learned pairwise position biases, sigmoid gate",
                              .per_channel = true,
                              .keeps_tokens = true,
                              .tensors = {{"pos_bias", position_bias_shape, zero_init}},
                              .options = &aft_options_codec(),
                              .cache_floats_per_token_per_layer = aft_cache_floats,
                              .core_flops_per_token = aft_core_flops,
                              .block = block_instance<AftMixer>};
  return spec;
}

}  // namespace retnet::detail
