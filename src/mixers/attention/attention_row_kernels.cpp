// The softmax rows of the attention kernels (attention_row_kernels.h), compiled once per
// instruction-set level (retnet/core/isa_kernels.h): AVX-512 where the level has it, else loops
// over fast_exp that the compiler vectorises for the level.
// GCC 12's own AVX-512 headers trip -W(maybe-)uninitialized (their "undefined" register idiom in
// _mm512_reduce_add_ps); the warning is about the headers, not this code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include <immintrin.h>

#include <algorithm>

#include "attention_row_kernels.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {

float attention_exp_shifted_sum(float* x, int64_t n, float shift) {
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = fast_exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    _mm512_storeu_ps(x + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {  // tail: masked loads and stores touch nothing past x[n - 1]
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = fast_exp_nonpositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), s));
    _mm512_mask_storeu_ps(x + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
#else
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    x[j] = fast_exp_nonpositive(x[j] - shift);
    sum += x[j];
  }
  return sum;
#endif
}

float attention_max_of(const float* x, int64_t n, float init) {
#if defined(__AVX512F__)
  __m512 mv = _mm512_set1_ps(init);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + j));
  if (j < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - j)) - 1);
    mv = _mm512_mask_max_ps(mv, k, mv, _mm512_maskz_loadu_ps(k, x + j));
  }
  return _mm512_reduce_max_ps(mv);
#else
  float m = init;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
#endif
}

void attention_row_dots(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t T,
                        int64_t n, float* D) {
  for (int64_t t = 0; t < T; ++t) {
    const float* x = a + t * lda;
    const float* y = b + t * ldb;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += x[j] * y[j];
    D[t] = s;
  }
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
