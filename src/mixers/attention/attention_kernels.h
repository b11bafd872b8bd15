#pragma once
// Inner loops shared by the attention forward, backward and decode kernels (internal header).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their "undefined" register idiom in
// _mm512_reduce_add_ps); the warning is about the headers, not this code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../shared/head_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/tensor.h"
#include "retnet/ops/fast_exp.h"

namespace retnet::attention_detail {

// x[j] = exp(x[j] - shift) for j < n, shift >= max(x) (so the arguments are <= 0); returns their
// sum.
inline float exp_shifted_sum(float* x, int64_t n, float shift) {
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

inline float max_of(const float* x, int64_t n, float init) {
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

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

// Checks that q: [B, T, H, Dk], k: [B, T, Hkv, Dk], v: [B, T, Hkv, Dv] and out: [B, T, H, Dv]
// agree, with unit last stride. Hkv = H unless `grouped` (the KV-cache kernels: kv heads shared
// by groups of G = H / Hkv query heads; query head h reads kv head h / G).
struct Dims {
  int64_t B, T, H, Dk, Dv, Hkv = H;
  int64_t groups() const { return H / Hkv; }
};
inline Dims check_dims(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const char* what, bool grouped = false) {
  Dims d{q.shape[0], q.shape[1], q.shape[2], q.shape[3], v.shape[3], k.shape[2]};
  if (!grouped || d.Hkv < 1 || d.H % d.Hkv != 0) d.Hkv = d.H;
  auto same = [&](const TensorView& t, int64_t heads, int64_t last) {
    return detail::is_head_view(t, d.B, d.T, heads, last) && t.data != nullptr;
  };
  RETNET_CHECK(same(q, d.H, d.Dk) && same(k, d.Hkv, d.Dk) && same(v, d.Hkv, d.Dv) &&
                   same(out, d.H, d.Dv),
               "{}: q must be [B, T, H, Dk], k [B, T, Hkv, Dk], v [B, T, Hkv, Dv] and out "
               "[B, T, H, Dv] with unit stride in the last dim (Hkv = H{}); got q [{}, {}, {}, {}], "
               "k [{}, {}, {}, {}], v [{}, {}, {}, {}], out [{}, {}, {}, {}]",
               what, grouped ? ", or a divisor of H" : "", q.shape[0], q.shape[1], q.shape[2],
               q.shape[3], k.shape[0], k.shape[1], k.shape[2], k.shape[3], v.shape[0], v.shape[1],
               v.shape[2], v.shape[3], out.shape[0], out.shape[1], out.shape[2], out.shape[3]);
  RETNET_CHECK(d.Dk >= 1 && d.Dv >= 1, "{}: head dims must be positive, got Dk {} and Dv {}", what,
               d.Dk, d.Dv);
  return d;
}

inline size_t thread_slots() { return static_cast<size_t>(std::max(omp_get_max_threads(), 1)); }

}  // namespace retnet::attention_detail
