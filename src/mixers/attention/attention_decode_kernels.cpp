// Softmax attention's decode step over the token-major cache (attention_decode_kernels.h),
// compiled once per instruction-set level (retnet/core/isa_kernels.h): flash-decoding, a task per
// range of a sequence's tokens reading its cache rows once, front to back, for all heads at a
// time, with a partial softmax per head that the merge combines.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "attention_decode_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_row_kernels.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

}  // namespace

void attention_decode_range(const float* q, int64_t ldq_head, const float* rows,
                            const AttentionDecodeShape& d, int64_t begin, int64_t end,
                            float* scores, float* partial) {
  constexpr int64_t kBlock = kAttentionDecodeBlock;
  const int64_t row = d.Hkv * (d.Dk + d.Dv), W = d.Dv + 2, G = d.H / d.Hkv;
  const float scale = 1.f / std::sqrt(static_cast<float>(d.Dk));
  for (int64_t h = 0; h < d.H; ++h) {
    std::fill(partial + h * W, partial + h * W + d.Dv, 0.f);
    partial[h * W + d.Dv] = -std::numeric_limits<float>::infinity();
    partial[h * W + d.Dv + 1] = 0.f;
  }
  for (int64_t j0 = begin; j0 < end; j0 += kBlock) {
    const int64_t n = std::min(kBlock, end - j0);
    for (int64_t j = 0; j < n; ++j) {
      const float* keys = rows + (j0 + j) * row;
      for (int64_t h = 0; h < d.H; ++h)
        scores[h * kBlock + j] = scale * dot(q + h * ldq_head, keys + (h / G) * d.Dk, d.Dk);
    }
    for (int64_t h = 0; h < d.H; ++h) {
      float* acc = partial + h * W;
      float* s = scores + h * kBlock;
      const float m = attention_max_of(s, n, acc[d.Dv]);
      const float correction = fast_exp_nonpositive(acc[d.Dv] - m);
      acc[d.Dv + 1] = acc[d.Dv + 1] * correction + attention_exp_shifted_sum(s, n, m);
      acc[d.Dv] = m;
      if (correction != 1.f) {
#pragma omp simd
        for (int64_t c = 0; c < d.Dv; ++c) acc[c] *= correction;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* values = rows + (j0 + j) * row + d.Hkv * d.Dk;
      for (int64_t h = 0; h < d.H; ++h) {
        float* acc = partial + h * W;
        const float* v = values + (h / G) * d.Dv;
        const float p = scores[h * kBlock + j];
#pragma omp simd
        for (int64_t c = 0; c < d.Dv; ++c) acc[c] += p * v[c];
      }
    }
  }
}

void attention_merge_partials(const float* partials, int64_t S, const AttentionDecodeShape& d,
                              int64_t h, float* out) {
  const int64_t W = d.Dv + 2, stride = d.H * W;
  float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
  for (int64_t s = 0; s < S; ++s) m = std::max(m, partials[s * stride + h * W + d.Dv]);
  std::fill(out, out + d.Dv, 0.f);
  for (int64_t s = 0; s < S; ++s) {
    const float* p = partials + s * stride + h * W;
    const float w = fast_exp_nonpositive(p[d.Dv] - m);  // 0 for an empty range (max -inf)
    sum += w * p[d.Dv + 1];
#pragma omp simd
    for (int64_t c = 0; c < d.Dv; ++c) out[c] += w * p[c];
  }
  const float inv = 1.f / sum;
#pragma omp simd
  for (int64_t c = 0; c < d.Dv; ++c) out[c] *= inv;
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
