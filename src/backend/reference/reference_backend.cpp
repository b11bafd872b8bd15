// The reference backend: plain scalar loops in double precision, written from the definitions,
// to check the CPU backend's kernels (and any later backend) against, model by model. Its speed
// is not a goal. Weights in any stored type are read back as float32 rows (a quantised or half
// weight's values are exactly those the CPU kernels multiply by). Each mixer is its family's
// naive definition (reference_<family>.cpp), the same for every form, continuing and leaving the
// pass's state and token cache in the CPU mixers' layouts, so either backend can take over.
#include <cmath>
#include <vector>

#include "reference_mixers.h"
#include "retnet/backend/backend.h"
#include "retnet/backend/cpu_kernels.h"
#include "retnet/core/error.h"
#include "retnet/model/mixer_layer.h"
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

  // Every form as its definition: the naive double-precision reference of the layer's mixer
  // family (reference_mixers.h), from the pass's state or cached tokens, never the mixer's own
  // forward or the CPU kernels.
  const float* mixer_forward(const LayerMixer&, const MixerPass& pass, Arena&) const override {
    RETNET_CHECK(!pass.saved && !pass.link, "the reference backend runs inference passes only");
    const MixerSpec* m = pass.model->layer_config(pass.layer).mixer;
    // The parallel form of a mixer with a constant state starts from an empty one and leaves the
    // pass's untouched, as the CPU's does.
    MixerPass p = pass;
    if (p.form == Form::Parallel && m->state_floats_per_layer) p.state = nullptr;
    if (m == &retention_mixer_spec()) return reference::retention_forward(p);
    if (m == &linear_mixer_spec() || m == &performer_mixer_spec())
      return reference::kernel_attention_forward(p);
    if (m == &rwkv_mixer_spec() || m == &aft_simple_mixer_spec())
      return reference::decay_forward(p);
    if (m == &attention_mixer_spec()) return reference::attention_forward(p);
    if (m == &aft_mixer_spec()) return reference::aft_forward(p);
    throw Error(
        fmt::format("the reference backend computes the built-in mixers only; layer {}'s "
                    "mixer '{}' is registered from outside the library",
                    p.layer, m->name));
  }
};

}  // namespace

const Backend& reference_backend() {
  static const ReferenceBackend backend;
  return backend;
}

}  // namespace retnet::detail
