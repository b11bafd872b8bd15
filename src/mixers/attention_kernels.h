#pragma once
// Inner loops shared by the attention forward, backward and decode kernels (internal header).
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their "undefined" register idiom in
// _mm512_reduce_add_ps); the warning is about the headers, not this code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "retnet/core/error.h"
#include "retnet/core/tensor.h"

namespace retnet::attention_detail {

// exp(x) for x <= 0 (softmax arguments after subtracting the row maximum), relative error ~2e-7.
// Why not std::exp: a tile row of exponentials costs as much as its two tile products, and libm's
// expf does not vectorise without -ffast-math; this one is plain arithmetic, so `omp simd` loops
// over it become AVX-512. Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-7
// polynomial, 2^n put into the exponent bits. Below -87 (and for -inf) the result is 0.
#pragma omp declare simd notinbranch
inline float exp_nonpositive(float x) {
  const float xc = std::max(x, -87.0f);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;  // ln2 split in two for an exact n * ln2_hi
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_n;
}

#if defined(__AVX512F__)
// The same exponential on 16 lanes. Written out because GCC vectorises the scalar one with 256-bit
// vectors only (its tuning for this CPU), and the exponentials of a tile are a quarter of its time.
inline __m512 exp_nonpositive16(__m512 x) {
  const __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __mmask16 alive = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(alive, _mm512_scalef_ps(p, n));
}
#endif

// x[j] = exp(x[j] - shift) for j < n; returns their sum.
inline float exp_shifted_sum(float* x, int64_t n, float shift) {
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    _mm512_storeu_ps(x + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {  // tail: masked loads and stores touch nothing past x[n - 1]
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), s));
    _mm512_mask_storeu_ps(x + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
#else
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    x[j] = exp_nonpositive(x[j] - shift);
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

// Checks that q, k: [B, T, H, Dk] and v, out: [B, T, H, Dv] agree, with unit last stride.
struct Dims {
  int64_t B, T, H, Dk, Dv;
};
inline Dims check_dims(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const char* what) {
  Dims d{q.shape[0], q.shape[1], q.shape[2], q.shape[3], v.shape[3]};
  auto same = [&](const TensorView& t, int64_t last) {
    return t.ndim == 4 && t.shape[0] == d.B && t.shape[1] == d.T && t.shape[2] == d.H &&
           t.shape[3] == last && t.stride[3] == 1 && t.data != nullptr;
  };
  RETNET_CHECK(same(q, d.Dk) && same(k, d.Dk) && same(v, d.Dv) && same(out, d.Dv),
               "{}: q, k must be [B, T, H, Dk] and v, out [B, T, H, Dv] with unit stride in the "
               "last dim; got q [{}, {}, {}, {}], k [{}, {}, {}, {}], v [{}, {}, {}, {}], "
               "out [{}, {}, {}, {}]",
               what, q.shape[0], q.shape[1], q.shape[2], q.shape[3], k.shape[0], k.shape[1],
               k.shape[2], k.shape[3], v.shape[0], v.shape[1], v.shape[2], v.shape[3], out.shape[0],
               out.shape[1], out.shape[2], out.shape[3]);
  RETNET_CHECK(d.Dk >= 1 && d.Dv >= 1, "{}: head dims must be positive, got Dk {} and Dv {}", what,
               d.Dk, d.Dv);
  return d;
}

inline size_t thread_slots() { return static_cast<size_t>(std::max(omp_get_max_threads(), 1)); }

}  // namespace retnet::attention_detail
