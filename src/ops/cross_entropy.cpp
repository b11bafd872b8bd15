#include "retnet/ops/cross_entropy.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "retnet/core/finite_check.h"
#include "retnet/core/gemm.h"

namespace retnet {

namespace {

// `product(r0, R)` writes the logits of rows r0..r0+R into `logits`.
template <typename Product>
double cross_entropy_blocks(const Product& product, const float* xn, const float* W,
                            const int32_t* targets, int64_t N, int64_t T, int64_t d, int64_t V,
                            float* logits, float* dxn, float* dW, int64_t grad_count) {
  double total = 0;
  const float inv_n = 1.f / static_cast<float>(grad_count > 0 ? grad_count : N);
  for (int64_t r0 = 0; r0 < N; r0 += kCrossEntropyBlock) {
    const int64_t R = std::min(kCrossEntropyBlock, N - r0);
    product(r0, R);
    check_finite_rows(logits, R, V, V, {T, nullptr, 0, r0}, "the logits", -1, FLT_MAX);
    double block_loss = 0;
#pragma omp parallel for schedule(static) reduction(+ : block_loss) if (R * V > 16384)
    for (int64_t r = 0; r < R; ++r) {
      float* z = logits + r * V;
      const float m = *std::max_element(z, z + V);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j] - m));
      const double lse = m + std::log(sum);
      const int32_t t = targets[r0 + r];
      block_loss += lse - z[t];
      if (dxn) {
        for (int64_t j = 0; j < V; ++j)
          z[j] = static_cast<float>(std::exp(static_cast<double>(z[j]) - lse)) * inv_n;
        z[t] -= inv_n;
      }
    }
    total += block_loss;
    if (dxn) {
      sgemm(Trans::No, Trans::No, R, d, V, 1.f, logits, V, W, d, 0.f, dxn + r0 * d, d);
      sgemm(Trans::Yes, Trans::No, V, d, R, 1.f, logits, V, xn + r0 * d, d, 1.f, dW, d);
    }
  }
  return total / static_cast<double>(N);
}

}  // namespace

double cross_entropy_with_head(const float* xn, const float* W, const int32_t* targets, int64_t N,
                               int64_t T, int64_t d, int64_t V, float* logits, float* dxn,
                               float* dW, int64_t grad_count) {
  auto product = [&](int64_t r0, int64_t R) {
    sgemm(Trans::No, Trans::Yes, R, V, d, 1.f, xn + r0 * d, d, W, d, 0.f, logits, V);
  };
  return cross_entropy_blocks(product, xn, W, targets, N, T, d, V, logits, dxn, dW, grad_count);
}

double cross_entropy_with_head(const float* xn, const HeadProduct& head, const int32_t* targets,
                               int64_t N, int64_t T, int64_t d, int64_t V, float* logits) {
  auto product = [&](int64_t r0, int64_t R) { head(xn + r0 * d, R, logits); };
  return cross_entropy_blocks(product, xn, nullptr, targets, N, T, d, V, logits, nullptr, nullptr,
                              0);
}

}  // namespace retnet
