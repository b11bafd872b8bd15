// Activation names and the gated activations' entry points (activation_kernels.cpp holds the
// rows, per instruction-set level).
#include "retnet/ops/activation.h"

#include "retnet/core/error.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::Gelu;
  if (name == "swish" || name == "silu") return Activation::Swish;
  throw Error(fmt::format("unknown activation_fn '{}'; expected 'gelu' or 'swish'", name));
}

const char* activation_name(Activation a) { return a == Activation::Gelu ? "gelu" : "swish"; }

void gated_activation_forward(Activation act, const float* a, int64_t lda, const float* b,
                              int64_t ldb, float* out, int64_t ldo, int64_t N, int64_t D) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), gated_activation_forward);
  kernel(act, a, lda, b, ldb, out, ldo, N, D);
}

void gated_activation_backward(Activation act, const float* a, int64_t lda, const float* b,
                               int64_t ldb, const float* dout, int64_t ldd, float* da, int64_t ldda,
                               float* db, int64_t lddb, int64_t N, int64_t D) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), gated_activation_backward);
  kernel(act, a, lda, b, ldb, dout, ldd, da, ldda, db, lddb, N, D);
}

}  // namespace retnet
