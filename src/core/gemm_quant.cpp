// Products against block-quantised weights (retnet/core/quant.h).
//
// Decoding (few rows): like ggml, each activation row is quantised to int8 per block of 32 (scale
// d_a = max|a| / 127), so a block's contribution is one integer dot product times d_w * d_a (plus
// m_w * d_a * sum(q_a) for Q4_1's minimum). The weights are in panels (groups of 16 rows
// interleaved, retnet/core/quant.h), so the SIMD kernels compute a group's rows in the lanes of
// vectors with no horizontal sums; their integer dot products use AVX2's maddubs/madd or AVX-512
// VNNI's dpbusd on 256-bit vectors (gemm_quant_simd.inc) or on 512-bit ones
// (gemm_quant_vnni512.inc), picked at run time from cpuid, or plain C++. Every C[m,n]
// goes through the same operations over the same bytes whatever M is and whichever rows it is
// computed with: batch-invariant, and the same on every kernel.
// Prefill (many rows): rows of W are dequantised to float32 in blocks and multiplied by sgemm.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/quant.h"

namespace retnet {
namespace {

// Activation rows quantised to int8 blocks: q [M][K], |q| (for Q8_0's sign trick), per block the
// scale d, d * sum(q) (Q4_1's minimum) and sum(q) (Q4_0's nibbles carry +8, and the 512-bit
// kernel's Q8_0 values +128: 8 or 128 times it is taken off).
struct ActivationRow {
  const int8_t *q, *qabs;
  const float *d, *s;
  const int32_t* sum;
};
struct ActivationRows {
  std::vector<int8_t> q, qabs;
  std::vector<float> d, s;
  std::vector<int32_t> sum;
  int64_t K = 0, nb = 0;
  ActivationRow row(int64_t m) const {
    return {q.data() + m * K, qabs.empty() ? nullptr : qabs.data() + m * K, d.data() + m * nb,
            s.data() + m * nb, sum.data() + m * nb};
  }
};

// One block of 32 activations to int8 with scale d = max|a| / 127 (round to nearest even); NaN or
// Inf in the block gives d = NaN and zeros, so that its products come out NaN.
float quantise_block_scalar(const float* a, int8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(a[i]));
  for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::isnan(a[i]) ? a[i] : amax;
  if (!std::isfinite(amax)) {
    std::memset(q, 0, kQuantBlock);
    return std::nanf("");
  }
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  for (int64_t i = 0; i < kQuantBlock; ++i) q[i] = static_cast<int8_t>(std::nearbyint(a[i] * id));
  return d;
}

#if defined(__x86_64__)
#define RETNET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RETNET_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

// The same block with AVX2, bit for bit (max is exact, a * id is one rounding, cvtps rounds to
// nearest even as nearbyint does in the default mode). False, writing nothing, for a block with
// NaN or Inf: the scalar version handles it. Also writes |q| (if qabs) and sum(q).
RETNET_AVX2 bool quantise_block_avx2(const float* a, int8_t* q, int8_t* qabs, float& d_out,
                                     int& sum_out) {
  __m256 v[4], amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.f), zero = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(a + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_mul_ps(v[i], zero), zero, _CMP_NEQ_UQ));
  }
  if (_mm256_movemask_ps(bad) != 0) return false;
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i x[4];
  for (int i = 0; i < 4; ++i) x[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
  // packs interleave the 128-bit lanes: groups of 4 bytes come out in the order 0 2 4 6 1 3 5 7.
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(x[0], x[1]), _mm256_packs_epi32(x[2], x[3]));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  if (qabs) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qabs), _mm256_abs_epi8(ordered));
  const __m256i pairs =
      _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), ordered), _mm256_set1_epi16(1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  sum_out = _mm_cvtsi128_si32(s);
  d_out = d;
  return true;
}
#endif

// `simd`: quantise with AVX2 (the same bytes, faster); the scalar kernel uses the scalar version.
// `with_abs`: also write |q| (qabs), for the kernels that use it.
void quantise_activations(int64_t M, int64_t K, const float* A, int64_t lda, bool simd,
                          bool with_abs, ActivationRows& out) {
  const int64_t nb = K / kQuantBlock;
  out.K = K;
  out.nb = nb;
  out.q.resize(static_cast<size_t>(M * K));
  out.d.resize(static_cast<size_t>(M * nb));
  out.s.resize(static_cast<size_t>(M * nb));
  out.sum.resize(static_cast<size_t>(M * nb));
  out.qabs.resize(with_abs ? static_cast<size_t>(M * K) : 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* a = A + m * lda + b * kQuantBlock;
      int8_t* q = out.q.data() + m * K + b * kQuantBlock;
      int8_t* qabs = out.qabs.empty() ? nullptr : out.qabs.data() + m * K + b * kQuantBlock;
      float d;
      int sum = 0;
#if defined(__x86_64__)
      if (!simd || !quantise_block_avx2(a, q, qabs, d, sum))
#endif
      {
        d = quantise_block_scalar(a, q);
        for (int64_t i = 0; i < kQuantBlock; ++i) sum += q[i];
        if (qabs)
          for (int64_t i = 0; i < kQuantBlock; ++i) qabs[i] = static_cast<int8_t>(std::abs(q[i]));
      }
      out.d[m * nb + b] = d;
      out.s[m * nb + b] = d * static_cast<float>(sum);
      out.sum[m * nb + b] = sum;
    }
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// One group of panels (kQuantPanelRows rows, nb blocks) dotted with one quantised activation
// row: the reference the SIMD kernels equal bit for bit (the same integer sums, the same fmas in
// the same order).
void group_dot_scalar(QuantType type, const uint8_t* group, int64_t nb, const ActivationRow& a,
                      float* out) {
  constexpr int64_t R = kQuantPanelRows, word = 4 * R;
  const int64_t words = type == QuantType::Q8_0 ? 8 : 4;
  const int64_t quants = words * word;
  const int64_t scales = type == QuantType::Q4_1 ? 4 * R : 2 * R;
  for (int64_t r = 0; r < R; ++r) out[r] = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = group + b * (quants + scales);
    const uint8_t* s = q + quants;
    const int8_t* qa = a.q + b * kQuantBlock;
    // Word j holds bytes 4j..4j+3 of each row in turn: read in memory order.
    int isum[R] = {};
    for (int64_t j = 0; j < words; ++j, q += word) {
      int prod[word];  // the word's products first: a loop compilers vectorise
      if (type == QuantType::Q8_0)
        for (int64_t i = 0; i < word; ++i) prod[i] = static_cast<int8_t>(q[i]) * qa[4 * j + i % 4];
      else
        for (int64_t i = 0; i < word; ++i)
          prod[i] = (q[i] & 0x0f) * qa[4 * j + i % 4] + (q[i] >> 4) * qa[16 + 4 * j + i % 4];
      for (int64_t r = 0; r < R; ++r)
        isum[r] += prod[4 * r] + prod[4 * r + 1] + prod[4 * r + 2] + prod[4 * r + 3];
    }
    for (int64_t r = 0; r < R; ++r) {
      if (type == QuantType::Q4_0) isum[r] -= 8 * a.sum[b];
      out[r] = std::fma(half_at(s + 2 * r) * a.d[b], static_cast<float>(isum[r]), out[r]);
      if (type == QuantType::Q4_1) out[r] = std::fma(half_at(s + 2 * R + 2 * r), a.s[b], out[r]);
    }
  }
}

template <QuantType T>
void scalar_group_dot(const uint8_t* group, int64_t nb, const ActivationRow& a, bool /*prefetch*/,
                      float* out) {
  group_dot_scalar(T, group, nb, a, out);
}

#if defined(__x86_64__)
// AVX2: maddubs (unsigned x signed bytes to int16 pairs) then madd to int32. maddubs saturates
// nothing here: |q_a| <= 127 and the unsigned side is |q_a| (Q8_0, <= 127) or a nibble (<= 15);
// the 8 nibble products of nibble_dot summed in int16 stay within 8 * 2 * 15 * 127 = 30480.
namespace avx2 {
RETNET_AVX2 inline __m256i dot_add(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
RETNET_AVX2 inline __m256i nibble_dot(const __m256i* lo, const __m256i* a_lo, const __m256i* hi,
                                      const __m256i* a_hi) {
  __m256i s16 = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j)
    s16 = _mm256_add_epi16(s16, _mm256_add_epi16(_mm256_maddubs_epi16(lo[j], a_lo[j]),
                                                 _mm256_maddubs_epi16(hi[j], a_hi[j])));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}
}  // namespace avx2
#define QK_NS avx2
#define QK_TARGET RETNET_AVX2
#include "gemm_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET

// AVX-512 VNNI (256-bit): dpbusd does maddubs + madd + add in one instruction.
namespace vnni {
RETNET_VNNI inline __m256i dot_add(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
RETNET_VNNI inline __m256i nibble_dot(const __m256i* lo, const __m256i* a_lo, const __m256i* hi,
                                      const __m256i* a_hi) {
  // Two chains (the low and the high nibbles), as in q8_0's block.
  __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    low = _mm256_dpbusd_epi32(low, lo[j], a_lo[j]);
    high = _mm256_dpbusd_epi32(high, hi[j], a_hi[j]);
  }
  return _mm256_add_epi32(low, high);
}
}  // namespace vnni
#define QK_NS vnni
#define QK_TARGET RETNET_VNNI
#include "gemm_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET

// AVX-512 VNNI (512-bit).
#include "gemm_quant_vnni512.inc"
#endif

// Groups [g0, g1) of W (rows [16 g0, min(N, 16 g1))) against every activation row, with a kernel's
// group_dot<T>. The first activation row brings the group into cache for the others and, with
// Prefetch, has the kernel prefetch what follows.
template <auto GroupDot, bool Prefetch>
void groups_range(const uint8_t* W, size_t group_bytes, const ActivationRows& act, int64_t M,
                  int64_t N, int64_t g0, int64_t g1, int64_t nb, float beta, float* C,
                  int64_t ldc) {
  alignas(64) float v[kQuantPanelRows];
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = W + static_cast<size_t>(g) * group_bytes;
    const int64_t n0 = g * kQuantPanelRows, rows = std::min(kQuantPanelRows, N - n0);
    for (int64_t m = 0; m < M; ++m) {
      GroupDot(group, nb, act.row(m), Prefetch && m == 0, v);
      for (int64_t r = 0; r < rows; ++r) {
        float& c = C[m * ldc + n0 + r];
        c = beta == 0.f ? v[r] : v[r] + beta * c;
      }
    }
  }
}

using RowsFn = void (*)(const uint8_t*, size_t, const ActivationRows&, int64_t, int64_t, int64_t,
                        int64_t, int64_t, float, float*, int64_t);

// A kernel's groups_range for each type.
template <template <QuantType> class Kernel, bool Prefetch>
RowsFn rows_of(QuantType type) {
  switch (type) {
    case QuantType::Q8_0:
      return groups_range<Kernel<QuantType::Q8_0>::dot, Prefetch>;
    case QuantType::Q4_0:
      return groups_range<Kernel<QuantType::Q4_0>::dot, Prefetch>;
    default:
      return groups_range<Kernel<QuantType::Q4_1>::dot, Prefetch>;
  }
}
template <QuantType T>
struct ScalarKernel {
  static constexpr auto dot = scalar_group_dot<T>;
};
#if defined(__x86_64__)
template <QuantType T>
struct Avx2Kernel {
  static constexpr auto dot = avx2::group_dot<T>;
};
template <QuantType T>
struct VnniKernel {
  static constexpr auto dot = vnni::group_dot<T>;
};
template <QuantType T>
struct Vnni512Kernel {
  static constexpr auto dot = vnni512::group_dot<T>;
};
#endif

RowsFn rows_function(QuantKernel kernel, QuantType type) {
  RETNET_CHECK(quant_kernel_available(kernel),
               "the {} kernel for quantised weights needs a CPU feature this machine lacks",
               quant_kernel_name(kernel));
#if defined(__x86_64__)
  // An AMD core's hardware prefetcher follows the panels' one sequential stream at memory's speed,
  // and software prefetches there hold its few miss buffers; Intel cores stop at 4 KiB pages and
  // gain from them (docs/design-notes.md#quantised-kernels-and-prefetch). The 512-bit kernel,
  // chosen on AMD only, has none.
  static const bool prefetch = !__builtin_cpu_is("amd");
  if (kernel == QuantKernel::Avx512Vnni512) return rows_of<Vnni512Kernel, false>(type);
  if (kernel == QuantKernel::Avx512Vnni)
    return prefetch ? rows_of<VnniKernel, true>(type) : rows_of<VnniKernel, false>(type);
  if (kernel == QuantKernel::Avx2)
    return prefetch ? rows_of<Avx2Kernel, true>(type) : rows_of<Avx2Kernel, false>(type);
#endif
  return rows_of<ScalarKernel, false>(type);
}

void few_rows(QuantKernel kernel, QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc) {
  const size_t group_bytes =
      kQuantPanelRows * quant_row_bytes(type, K, "the weights of a quantised product");
  const int64_t nb = K / kQuantBlock;
  const RowsFn rows_fn = rows_function(kernel, type);
  thread_local ActivationRows act;
  // |q| only for the 256-bit kernels' Q8_0 sign trick.
  const bool with_abs =
      type == QuantType::Q8_0 && (kernel == QuantKernel::Avx2 || kernel == QuantKernel::Avx512Vnni);
  quantise_activations(M, K, A, lda, kernel != QuantKernel::Scalar, with_abs, act);
  // One group of rows of W per task: each group is read from memory once and reused (from cache)
  // by every row of A.
  const int64_t groups = (N + kQuantPanelRows - 1) / kQuantPanelRows;
  const bool parallel = M * N * K >= (1 << 15) && groups > 1;
  const ActivationRows* shared = &act;  // the calling thread's rows, read by every thread
  if (!parallel) return rows_fn(W, group_bytes, act, M, N, 0, groups, nb, beta, C, ldc);
#pragma omp parallel
  {
    // Contiguous ranges of groups, one per thread: each streams its own stretch of W.
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t g0 = groups * t / threads, g1 = groups * (t + 1) / threads;
    rows_fn(W, group_bytes, *shared, M, N, g0, g1, nb, beta, C, ldc);
  }
}

// Rows of W dequantised a block at a time (converted_block_rows, reused across calls), then sgemm.
void dequantised_gemm(QuantType type, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const uint8_t* W, float beta, float* C, int64_t ldc) {
  quant_row_bytes(type, K, "the weights of a quantised product");
  const int64_t block_rows = converted_block_rows(N, K);
  thread_local std::vector<float> block;
  block.resize(static_cast<size_t>(block_rows * K));
  for (int64_t n0 = 0; n0 < N; n0 += block_rows) {
    const int64_t rows = std::min(block_rows, N - n0);
    float* b = block.data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r += kQuantPanelRows)
      dequantize_panel_rows(type, W, K, n0 + r, std::min(kQuantPanelRows, rows - r), b + r * K, K);
    sgemm(Trans::No, Trans::Yes, M, rows, K, 1.f, A, lda, b, K, beta, C + n0, ldc);
  }
}

}  // namespace

const char* quant_kernel_name(QuantKernel kernel) {
  switch (kernel) {
    case QuantKernel::Avx2:
      return "avx2";
    case QuantKernel::Avx512Vnni:
      return "avx512-vnni";
    case QuantKernel::Avx512Vnni512:
      return "avx512-vnni-512";
    default:
      return "scalar";
  }
}

bool quant_kernel_available(QuantKernel kernel) {
#if defined(__x86_64__)
  switch (kernel) {
    case QuantKernel::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case QuantKernel::Avx512Vnni:
    case QuantKernel::Avx512Vnni512:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    default:
      return true;
  }
#else
  return kernel == QuantKernel::Scalar;
#endif
}

QuantKernel quant_kernel_best() {
  static const QuantKernel best = [] {
    // The 512-bit kernel where it is faster (AMD cores run 512-bit vectors as two halves, at full
    // clock); on Intel cores an earlier 512-bit kernel was slower
    // (docs/design-notes.md#quantised-kernels-and-prefetch).
    // The AVX-512 level without VNNI (Skylake-X) takes the AVX2 kernel.
    if (kernel_isa() == Isa::Avx512 && quant_kernel_available(QuantKernel::Avx512Vnni))
      return __builtin_cpu_is("amd") ? QuantKernel::Avx512Vnni512 : QuantKernel::Avx512Vnni;
    if (kernel_isa() >= Isa::Avx2) return QuantKernel::Avx2;
    return QuantKernel::Scalar;
  }();
  return best;
}

void quant_gemm_nt(QuantType type, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const uint8_t* W, float beta, float* C, int64_t ldc) {
  if (M <= kSkinnyMaxRows)
    few_rows(quant_kernel_best(), type, M, N, K, A, lda, W, beta, C, ldc);
  else
    dequantised_gemm(type, M, N, K, A, lda, W, beta, C, ldc);
}

void quant_gemm_nt_with(QuantKernel kernel, QuantType type, int64_t M, int64_t N, int64_t K,
                        const float* A, int64_t lda, const uint8_t* W, float beta, float* C,
                        int64_t ldc) {
  few_rows(kernel, type, M, N, K, A, lda, W, beta, C, ldc);
}

void quant_gemm_nt_reference(QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
                             int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc) {
  const size_t row_bytes = quant_row_bytes(type, K);
  std::vector<float> w(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    dequantize_rows(type, W + static_cast<size_t>(n) * row_bytes, 1, K, w.data(), K);
    for (int64_t m = 0; m < M; ++m) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(A[m * lda + k]) * w[k];
      float& c = C[m * ldc + n];
      c = static_cast<float>(beta == 0.f ? s : s + static_cast<double>(beta) * c);
    }
  }
}

}  // namespace retnet
