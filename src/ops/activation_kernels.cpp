// The gated activations' rows (activation.h), compiled once per instruction-set level
// (retnet/core/isa_kernels.h); activation.cpp picks one.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "retnet/core/parallel.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {
namespace RETNET_ISA_NS {

void gated_activation_forward(Activation act, const float* a, int64_t lda, const float* b,
                              int64_t ldb, float* out, int64_t ldo, int64_t N, int64_t D) {
  // Threads pay off from ~10 us of work; gelu costs about three times swish per element
  // (docs/design-notes.md#gated-activation-threads): a batch-16 decode step's FFN runs on all
  // threads.
  const int64_t parallel_from = act == Activation::Gelu ? 4096 : 16384;
  parallel_for_if(N * D >= parallel_from, N, [&](int64_t n) {
    const float* ar = a + n * lda;
    const float* br = b + n * ldb;
    float* o = out + n * ldo;
    if (act == Activation::Gelu) {
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) o[i] = gelu(ar[i]) * br[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) o[i] = swish(ar[i]) * br[i];
    }
  });
}

void gated_activation_backward(Activation act, const float* a, int64_t lda, const float* b,
                               int64_t ldb, const float* dout, int64_t ldd, float* da, int64_t ldda,
                               float* db, int64_t lddb, int64_t N, int64_t D) {
  parallel_for_if(N * D > 16384, N, [&](int64_t n) {
    const float* ar = a + n * lda;
    const float* br = b + n * ldb;
    const float* g = dout + n * ldd;
    float* dar = da + n * ldda;
    float* dbr = db + n * lddb;
    if (act == Activation::Gelu) {
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) {
        const float x = ar[i], y = br[i];
        dar[i] = gelu_grad(x) * y * g[i];
        dbr[i] = gelu(x) * g[i];
      }
    } else {  // one pass, vectorised: s = sigmoid(x), swish = x s, swish' = s (1 + x (1 - s))
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) {
        const float x = ar[i], y = br[i];
        const float s = 1.f / (1.f + fast_exp(-x));
        dar[i] = s * (1.f + x * (1.f - s)) * y * g[i];
        dbr[i] = x * s * g[i];
      }
    }
  });
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
