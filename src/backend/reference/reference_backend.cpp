// The reference backend: plain scalar loops in double precision, written from the definitions,
// to check the CPU backend's kernels (and any later backend) against, model by model. Its speed
// is not a goal. Weights in any stored type are read back as float32 rows (a quantised or half
// weight's values are exactly those the CPU kernels multiply by).
#include <cmath>
#include <cstring>
#include <vector>

#include "retnet/backend/backend.h"
#include "retnet/backend/cpu_kernels.h"
#include "retnet/core/error.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/state.h"
#include "retnet/model/weight_ops.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {
namespace {

// The float32 values of weight `w` [N, K] (with the adjacent tensors that follow it), from the
// copy the model multiplies by (model.weight: packed, in place, or the float32 buffer).
std::vector<float> weight_values(const Model& model, size_t w, int64_t N, int64_t K) {
  const Weight& weight = model.weight(w);
  RETNET_CHECK(weight.N == N && weight.K == K,
               "weight '{}' is [{}, {}], but the product needs [{}, {}]", weight.name, weight.N,
               weight.K, N, K);
  check_finite_in_place(weight);
  std::vector<float> values(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) weight_row(weight, n, 1.f, values.data() + n * K);
  return values;
}

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }

  void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
               int64_t ldx, bool accumulate, float* y, int64_t ldy) const override {
    const std::vector<float> W = weight_values(model, w, N, K);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = accumulate ? y[m * ldy + n] : 0.0;
        for (int64_t k = 0; k < K; ++k) sum += double(x[m * ldx + k]) * W[n * K + k];
        y[m * ldy + n] = static_cast<float>(sum);
      }
  }

  // A lookup has no arithmetic of its own to check: the CPU backend's reads every stored type.
  void embed(const Model& model, const int32_t* tokens, int64_t N, float* x) const override {
    embed_tokens(model, tokens, N, x);
  }

  void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, float* rstd,
               int64_t N, int64_t D, float eps) const override {
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(x[n * ldx + i]) * x[n * ldx + i];
      const double r = 1.0 / std::sqrt(ss / double(D) + eps);
      if (rstd) rstd[n] = static_cast<float>(r);
      for (int64_t i = 0; i < D; ++i)
        y[n * ldy + i] = static_cast<float>(x[n * ldx + i] * r * (w ? w[i] : 1.f));
    }
  }

  void gated_activation(Activation act, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* out, int64_t ldo, int64_t N, int64_t D) const override {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < D; ++i) {
        const double x = a[n * lda + i], g = b[n * ldb + i];
        const double y = act == Activation::Gelu ? 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))
                                                 : x / (1.0 + std::exp(-x));
        out[n * ldo + i] = static_cast<float>(y * g);
      }
  }

  // The table is the definition itself: cos and sin of position x theta, formed in double.
  int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                         const int64_t* positions, float* table) const override {
    return retnet::rotation_table(thetas, B, T, positions, table);
  }

  // Every form as its definition, the recurrence: one token at a time from the pass's state (a
  // zero state where the pass has none) or through its cache, by the mixer's decode step.
  const float* mixer_forward(const LayerMixer& mixer, const MixerPass& p, Arena&) const override {
    const Model& model = *p.model;
    const Config& lc = model.layer_config(p.layer);
    RETNET_CHECK(!p.saved && !p.link, "the reference backend runs inference passes only");
    const int64_t B = p.B, T = p.T, P = lc.projection_width(), vd = lc.value_embed_dim;
    const int64_t floats =
        lc.mixer->state_floats_per_layer ? lc.mixer->state_floats_per_layer(lc) : 0;
    MixerPass step = p;
    step.T = 1;
    step.form = Form::Recurrent;
    // A pass of a mixer with a token cache but without one (a parallel pass from empty
    // sequences): its tokens go through a cache of this layer alone.
    TokenCache cache;
    if (floats == 0 && !p.cache) {
      const int64_t row = lc.mixer->cache_floats_per_token_per_layer(lc);
      cache.layers = 1, cache.sequences = B, cache.capacity = T;
      cache.floats_per_token = row;
      cache.row_floats = {row};
      cache.storage = {std::vector<float>(static_cast<size_t>(B * T * row))};
      step.cache = &cache;
      step.cache_layer = 0, step.first = 0, step.rows = nullptr;
    }
    std::vector<float> zero_state;
    if (!p.state && floats > 0) {
      zero_state.assign(static_cast<size_t>(B * floats), 0.f);
      step.state = zero_state.data();
      step.state_stride = floats;
    }
    std::vector<float> proj(static_cast<size_t>(B * P)), out(static_cast<size_t>(B * vd));
    std::vector<int64_t> positions(static_cast<size_t>(B));
    step.proj = proj.data();
    step.out = out.data();
    step.positions = positions.data();
    const int64_t rotation_row = 2 * static_cast<int64_t>(model.layer_thetas(p.layer).size());
    Arena arena(mixer.workspace_floats(lc, Form::Recurrent, B, 1, p.chunk, 0));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(proj.data() + b * P, p.proj + (b * T + t) * P, P * sizeof(float));
        positions[b] = (p.positions ? p.positions[b] : 0) + t;
      }
      if (p.rotation) step.rotation = p.rotation + t * rotation_row;
      arena.reset();
      const float* mixed = mixer.forward(step, arena);
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(p.out + (b * T + t) * vd, mixed + b * vd, vd * sizeof(float));
    }
    return p.out;
  }
};

}  // namespace

const Backend& reference_backend() {
  static const ReferenceBackend backend;
  return backend;
}

}  // namespace retnet::detail
