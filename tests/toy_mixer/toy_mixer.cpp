// The toy mixer (toy_mixer.h): its option, parallel, recurrent and chunkwise forms, the backward of
// training, its state size and FLOPs, and the one line that registers it.
#include "toy_mixer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "retnet/core/sequence_rows.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::toy {
namespace {

using detail::carve_saved;
using detail::MixerGrad;
using detail::MixerPass;
using detail::SavedSizes;

// The mixer's option, "toy_decay": lambda, in (0, 1). Its struct, JSON field and check live
// here; the library's config code names none of them.
struct ToyOptions : MixerOptionsOf<ToyOptions> {
  double decay = 0.75;
  bool operator==(const ToyOptions&) const = default;
};

MixerOptionsPtr read_options(const nlohmann::json& config, const std::string& origin) {
  if (!config.contains("toy_decay") || config["toy_decay"].is_null()) return nullptr;
  const nlohmann::json& v = config["toy_decay"];
  RETNET_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() < 1,
               "{}: 'toy_decay' must be a number in (0, 1), got {}", origin, v.dump());
  auto options = std::make_shared<ToyOptions>();
  options->decay = v.get<double>();
  return options;
}

void write_options(const MixerOptions* options, nlohmann::ordered_json& config) {
  config["toy_decay"] =
      options ? static_cast<const ToyOptions&>(*options).decay : ToyOptions{}.decay;
}

const detail::MixerOptionsCodec kToyOptionsCodec{
    .keys = {"toy_decay"}, .read = read_options, .write = write_options};

float toy_decay(const Config& c) {
  return static_cast<float>(detail::mixer_options<ToyOptions>(c).decay);
}

// lambda^0 .. lambda^n.
std::vector<float> decay_powers(double decay, int64_t n) {
  std::vector<float> p(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) p[i] = static_cast<float>(std::pow(decay, i));
  return p;
}

// Saved per token and channel: the output and the state s_t, in this order.
SavedSizes<2> saved_sizes(const Config& c, int64_t N) {
  const size_t n = static_cast<size_t>(N * c.value_embed_dim);
  return {n, n};
}

// One sequence's tokens [t0, t1) from state s (vd floats, updated), writing out and, when saving,
// each token's state. The parallel form is one span, the chunkwise form one span per chunk: each
// token sums its span's earlier tokens directly and the decayed state it started from; the
// recurrent form steps token by token.
void run_span(const float* proj, int64_t P, int64_t vd, int64_t t0, int64_t t1, float* s,
              const std::vector<float>& pw, float* out, float* saved_s, bool recurrent) {
  const float decay = pw[1];
  for (int64_t c = 0; c < vd; ++c) {
    const float start = s[c];
    float state = start;
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = proj + t * P;
      if (recurrent) {
        state = decay * state + row[vd + c] * row[2 * vd + c];
      } else {
        state = pw[t - t0 + 1] * start;
        for (int64_t j = t0; j <= t; ++j)
          state += pw[t - j] * proj[j * P + vd + c] * proj[j * P + 2 * vd + c];
      }
      out[t * vd + c] = row[c] * state;
      if (saved_s) saved_s[t * vd + c] = state;
    }
    s[c] = state;
  }
}

class ToyMixer final : public detail::SavedRegionsMixer<saved_sizes> {
 public:
  size_t workspace_floats(const Config&, Form, int64_t, int64_t, int64_t, int64_t) const override {
    return 0;
  }
  size_t backward_workspace_floats(const Config&, Form, int64_t, int64_t, int64_t) const override {
    return 0;
  }

  const float* forward(const MixerPass& p, Arena&) const override {
    const Config& c = p.model->layer_config(p.layer);
    const int64_t vd = c.value_embed_dim, P = c.projection_width(), T = p.T;
    float *out = p.out, *saved_s = nullptr;
    if (p.saved) {
      const auto [o, s] = carve_saved(p.saved, saved_sizes(c, p.B * T));
      out = o, saved_s = s;
    }
    const int64_t span = p.form == Form::Chunkwise ? std::max<int64_t>(p.chunk, 1) : T;
    const std::vector<float> pw = decay_powers(toy_decay(c), std::min(span, T) + 1);
    std::vector<float> zero(static_cast<size_t>(vd));
    for (int64_t b = 0; b < p.B; ++b) {
      float* s = p.state ? p.state + sequence_row(p.rows, b) * p.state_stride : zero.data();
      if (!p.state) std::fill(zero.begin(), zero.end(), 0.f);
      const float* proj = p.proj + b * T * P;
      float* ob = out + b * T * vd;
      float* sb = saved_s ? saved_s + b * T * vd : nullptr;
      for (int64_t t0 = 0; t0 < T; t0 += span)
        run_span(proj, P, vd, t0, std::min(t0 + span, T), s, pw, ob, sb, p.form == Form::Recurrent);
    }
    return out;
  }

  const float* output(const MixerGrad& g, float*) const override {
    const Config& c = g.model->layer_config(g.layer);
    return carve_saved(g.saved, saved_sizes(c, g.B * g.T))[0];
  }

  // From an empty state: d q_t = d out_t s_t; the state's gradient runs backwards,
  // g_t = lambda g_{t+1} + d out_t q_t, and d k_t = g_t v_t, d v_t = g_t k_t.
  void backward(const MixerGrad& g, Arena&) const override {
    const Config& c = g.model->layer_config(g.layer);
    const int64_t vd = c.value_embed_dim, P = c.projection_width(), T = g.T;
    const float* saved_s = carve_saved(g.saved, saved_sizes(c, g.B * T))[1];
    const float decay = toy_decay(c);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t ch = 0; ch < vd; ++ch) {
        float state_grad = 0.f;
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t n = b * T + t;
          const float* row = g.proj + n * P;
          float* d_row = g.d_proj + n * P;
          const float d_out = g.d_out[n * vd + ch];
          state_grad = decay * state_grad + d_out * row[ch];
          d_row[ch] = d_out * saved_s[n * vd + ch];
          d_row[vd + ch] = state_grad * row[2 * vd + ch];
          d_row[2 * vd + ch] = state_grad * row[vd + ch];
        }
      }
  }
};

int64_t toy_state_floats(const Config& c) { return c.value_embed_dim; }

// Per channel: a multiply-add per earlier token of the span (the sequence, or the chunk) in the
// parallel forms, a step's multiply-adds in the recurrent one.
double toy_core_flops(const Config& c, int64_t T, Form form, int64_t chunk) {
  const double vd = static_cast<double>(c.value_embed_dim);
  switch (form) {
    case Form::Parallel:
      return 3.0 * (static_cast<double>(T) / 2.0) * vd;
    case Form::Chunkwise:
      return 3.0 * (static_cast<double>(std::min(chunk, T)) / 2.0) * vd + 4.0 * vd;
    case Form::Recurrent:
    case Form::Scan:
      return 4.0 * vd;
  }
  return 0;
}

}  // namespace

const MixerSpec& toy_mixer_spec() {
  static const MixerSpec spec{
      .name = "toy",
      .scope = "toy",
      .summary = "toy: a per-channel running sum of k v decayed by toy_decay, times q",
      .per_channel = true,
      .forms = {true, true, true, false},
      .options = &kToyOptionsCodec,
      .state_floats_per_layer = toy_state_floats,
      .core_flops_per_token = toy_core_flops,
      .block = detail::block_instance<ToyMixer>};
  return spec;
}

// The one line that adds the mixer to every command of the binary it is linked into.
[[maybe_unused]] static const bool registered = register_mixer(toy_mixer_spec());

}  // namespace retnet::toy
