#pragma once
// Vectorisable float exponentials for the mixers' hot loops (softmax tiles, feature maps).
// Why not std::exp: libm's expf does not vectorise without -ffast-math, and a row of exponentials
// costs as much as the products around it. These are plain arithmetic, so `omp simd` loops over
// them vectorise. Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-7 polynomial,
// 2^n put into the exponent bits; relative error ~2e-7 (2 ulp). Below -87 (and for -inf) the
// result is 0, where float would underflow to denormals anyway; NaN gives NaN. Every finite
// argument gives the same bits as converting n to an integer would (checked over all 2^32 floats).
// Static: the per-ISA-level kernel files include this, and each must keep its own copy (one
// emitted out of line and shared would run one level's code at every level).
#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized where they are inlined (their
// "undefined register" idiom); the warning is about the headers, not their callers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace retnet {

namespace fast_exp_detail {

// exp(xc) for xc already clamped to [-87, 88].
#pragma omp declare simd notinbranch
static inline float exp_clamped(float xc) {
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
  // 2^n from n's bits after adding 1.5 * 2^23 (n lands in the low mantissa bits) rather than by
  // converting n to an integer, which is undefined for the NaN that a NaN argument brings.
  const int32_t n_bits = std::bit_cast<int32_t>(n + 12582912.f) - 0x4B400000;
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(n_bits + 127) << 23);
  return p * two_n;
}

}  // namespace fast_exp_detail

// exp(x) for x <= 88 (above, exp(88)); 0 below -87. Clamps with compares and selects, not
// std::fmin/fmax (library calls that GCC does not vectorise); GCC if-converts the selects only
// without trapping math (-fno-trapping-math).
#pragma omp declare simd notinbranch
static inline float fast_exp(float x) {
  const float xc = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  return x < -87.f ? 0.f : fast_exp_detail::exp_clamped(xc);
}

// exp(x) for x <= 0 (softmax arguments after subtracting the row maximum): one select fewer.
#pragma omp declare simd notinbranch
static inline float fast_exp_nonpositive(float x) {
  const float xc = x < -87.f ? -87.f : x;
  return x < -87.f ? 0.f : fast_exp_detail::exp_clamped(xc);
}

#if defined(__AVX512F__)
// fast_exp_nonpositive on 16 lanes. Written out because GCC vectorises the scalar one with 256-bit
// vectors only (its tuning for AVX-512 CPUs). Without AVX-512, loop over fast_exp_nonpositive in an
// `omp simd` loop instead.
static inline __m512 fast_exp_nonpositive16(__m512 x) {
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

}  // namespace retnet
