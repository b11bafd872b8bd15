// The CPU backend: the engine's own kernels (the products of model/weight_ops.h, which pick the
// packed, row-major, skinny or quantised GEMM for each weight; the vectorised norms and
// activations; each mixer's blocks).
#include <cstring>

#include "retnet/backend/backend.h"
#include "retnet/backend/cpu_kernels.h"
#include "retnet/core/error.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/weight_ops.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {

void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
             int64_t ldx, bool accumulate, float* y, int64_t ldy) {
  const Weight& weight = model.weight(w);
  RETNET_CHECK(weight.N == N && weight.K == K,
               "weight '{}' is [{}, {}], but the product needs [{}, {}]", weight.name, weight.N,
               weight.K, N, K);
  matmul(weight, M, x, ldx, accumulate ? 1.f : 0.f, y, ldy);
}

void embed_tokens(const Model& model, const int32_t* tokens, int64_t N, float* x) {
  const Config& c = model.config();
  // A tied embedding is the LM head's weight: its rows are read from wherever the head lies.
  embed_rows(model.weight(model.tensors().embed), tokens, N, static_cast<float>(c.embed_scale()),
             x);
}

namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
               int64_t ldx, bool accumulate, float* y, int64_t ldy) const override {
    detail::project(model, w, M, N, K, x, ldx, accumulate, y, ldy);
  }

  void embed(const Model& model, const int32_t* tokens, int64_t N, float* x) const override {
    embed_tokens(model, tokens, N, x);
  }

  void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, float* rstd,
               int64_t N, int64_t D, float eps) const override {
    rmsnorm_forward(x, ldx, w, y, ldy, rstd, N, D, eps);
  }

  void gated_activation(Activation act, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* out, int64_t ldo, int64_t N, int64_t D) const override {
    gated_activation_forward(act, a, lda, b, ldb, out, ldo, N, D);
  }

  int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                         const int64_t* positions, float* table) const override {
    return retnet::rotation_table(thetas, B, T, positions, table);
  }

  const float* mixer_forward(const LayerMixer& mixer, const MixerPass& pass,
                             Arena& arena) const override {
    return mixer.forward(pass, arena);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace retnet::detail
