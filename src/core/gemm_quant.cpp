// Products against block-quantised weights (retnet/core/quant.h).
//
// Decoding (few rows): like ggml, each activation row is quantised to int8 per block of 32 (scale
// d_a = max|a| / 127), so a block's contribution is one integer dot product times d_w * d_a (plus
// m_w * d_a * sum(q_a) for Q4_1's minimum). The integer dot products use AVX2's maddubs/madd or
// AVX-512 VNNI's dpbusd, picked at run time from cpuid (gemm_quant_simd.inc, several weight rows
// per pass), or plain C++. Every C[m,n] goes through the same operations over the same bytes
// whatever M is: batch-invariant.
// Prefill (many rows): rows of W are dequantised to float32 in blocks and multiplied by sgemm.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/quant.h"

namespace retnet {
namespace {

// Activation rows quantised to int8 blocks: q [M][K], per block the scale d, d * sum(q), and (for
// Q4_0, whose nibbles carry +8) the 16 int16 that the SIMD kernels subtract from their
// unsigned-nibble products: 8 * (q[2j] + q[2j+1] + q[2j+16] + q[2j+17]), j = i mod 8 (the int16
// lanes of two rows' values 0-15 and 16-31 added together; see gemm_quant_simd.inc).
struct ActivationRow {
  const int8_t* q;
  const float *d, *s;
  const int16_t* corr8;
};
struct ActivationRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int16_t> corr8;
  int64_t K = 0, nb = 0;
  ActivationRow row(int64_t m) const {
    return {q.data() + m * K, d.data() + m * nb, s.data() + m * nb,
            corr8.empty() ? nullptr : corr8.data() + m * nb * 16};
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
// NaN or Inf: the scalar version handles it.
RETNET_AVX2 bool quantise_block_avx2(const float* a, int8_t* q, float& d_out) {
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
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(q),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  d_out = d;
  return true;
}
#endif

// `simd`: quantise with AVX2 (the same bytes, faster); the scalar kernel uses the scalar version.
void quantise_activations(QuantType type, int64_t M, int64_t K, const float* A, int64_t lda,
                          bool simd, ActivationRows& out) {
  const int64_t nb = K / kQuantBlock;
  out.K = K;
  out.nb = nb;
  out.q.resize(static_cast<size_t>(M * K));
  out.d.resize(static_cast<size_t>(M * nb));
  out.s.resize(static_cast<size_t>(M * nb));
  out.corr8.resize(type == QuantType::Q4_0 ? static_cast<size_t>(M * nb * 16) : 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* a = A + m * lda + b * kQuantBlock;
      int8_t* q = out.q.data() + m * K + b * kQuantBlock;
      float d;
#if defined(__x86_64__)
      if (!simd || !quantise_block_avx2(a, q, d)) d = quantise_block_scalar(a, q);
#else
      d = quantise_block_scalar(a, q);
#endif
      int sum = 0;
      for (int64_t i = 0; i < kQuantBlock; ++i) sum += q[i];
      out.d[m * nb + b] = d;
      out.s[m * nb + b] = d * static_cast<float>(sum);
      if (type == QuantType::Q4_0)
        for (int64_t i = 0; i < kQuantBlock / 2; ++i)
          out.corr8[(m * nb + b) * 16 + i] = static_cast<int16_t>(
              8 * (q[i % 8 * 2] + q[i % 8 * 2 + 1] + q[i % 8 * 2 + 16] + q[i % 8 * 2 + 17]));
    }
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// One weight row (nb blocks) dotted with one quantised activation row.
float dot_scalar(QuantType type, const uint8_t* w, const ActivationRow& a, int64_t nb) {
  const int64_t block_bytes = quant_block_bytes(type);
  const int8_t* qa = a.q;
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b, w += block_bytes, qa += kQuantBlock) {
    const float dw = half_at(w);
    int isum = 0;
    if (type == QuantType::Q8_0) {
      for (int64_t i = 0; i < kQuantBlock; ++i) isum += static_cast<int8_t>(w[2 + i]) * qa[i];
      acc += dw * a.d[b] * static_cast<float>(isum);
    } else {
      const uint8_t* qs = w + (type == QuantType::Q4_1 ? 4 : 2);
      const int offset = type == QuantType::Q4_0 ? 8 : 0;
      for (int64_t j = 0; j < kQuantBlock / 2; ++j)
        isum += ((qs[j] & 0x0f) - offset) * qa[j] + ((qs[j] >> 4) - offset) * qa[j + 16];
      acc += dw * a.d[b] * static_cast<float>(isum);
      if (type == QuantType::Q4_1) acc += half_at(w + 2) * a.s[b];
    }
  }
  return acc;
}

void scalar_rows_range(QuantType type, const uint8_t* W, size_t row_bytes,
                       const ActivationRows& act, int64_t M, int64_t n0, int64_t n1, int64_t nb,
                       float beta, float* C, int64_t ldc) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const float v = dot_scalar(type, W + static_cast<size_t>(n) * row_bytes, act.row(m), nb);
      float& c = C[m * ldc + n];
      c = beta == 0.f ? v : v + beta * c;
    }
}

// Weight rows per pass of the SIMD kernels: they share each activation block's loads.
constexpr int64_t kRowsPerPass = 4;

#if defined(__x86_64__)
// AVX2: maddubs (unsigned x signed bytes to int16 pairs; cannot overflow here: |q_w| <= 127 or
// 15, |q_a| <= 127, and two nibble products plus Q4_0's correction stay within 4 * 15 * 127) then
// madd to int32. Q4_0's -8 is subtracted from the int16 lanes.
namespace avx2 {
struct Q40Correction {
  __m256i corr8;
};
RETNET_AVX2 inline Q40Correction corr_for(const int16_t* corr8) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr8))};
}
RETNET_AVX2 inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
RETNET_AVX2 inline __m256i dot_u8s8_2(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return _mm256_madd_epi16(
      _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1)),
      _mm256_set1_epi16(1));
}
RETNET_AVX2 inline __m256i dot_nibbles2(__m256i u0, __m256i s0, __m256i u1, __m256i s1,
                                        Q40Correction c) {
  return _mm256_madd_epi16(
      _mm256_sub_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1)),
                       c.corr8),
      _mm256_set1_epi16(1));
}
}  // namespace avx2
#define QK_NS avx2
#define QK_TARGET RETNET_AVX2
#include "gemm_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET

// AVX-512 VNNI (256-bit): dpbusd does maddubs + madd + add in one instruction; Q4_0's -8 becomes
// the accumulator's starting value, -8 * (sum of the lane's activations).
namespace vnni {
struct Q40Correction {
  __m256i minus_sum8;
};
RETNET_VNNI inline Q40Correction corr_for(const int16_t* corr8) {
  return {_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr8)),
                            _mm256_set1_epi16(-1))};
}
RETNET_VNNI inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
RETNET_VNNI inline __m256i dot_u8s8_2(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
}
RETNET_VNNI inline __m256i dot_nibbles2(__m256i u0, __m256i s0, __m256i u1, __m256i s1,
                                        Q40Correction c) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(c.minus_sum8, u0, s0), u1, s1);
}
}  // namespace vnni
#define QK_NS vnni
#define QK_TARGET RETNET_VNNI
#include "gemm_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET
#endif

using RowsFn = void (*)(QuantType, const uint8_t*, size_t, const ActivationRows&, int64_t, int64_t,
                        int64_t, int64_t, float, float*, int64_t);

RowsFn rows_function(QuantKernel kernel) {
  RETNET_CHECK(quant_kernel_available(kernel),
               "the {} kernel for quantised weights needs a CPU feature this machine lacks",
               quant_kernel_name(kernel));
#if defined(__x86_64__)
  if (kernel == QuantKernel::Avx512Vnni) return vnni::rows_range_any;
  if (kernel == QuantKernel::Avx2) return avx2::rows_range_any;
#endif
  return scalar_rows_range;
}

void few_rows(RowsFn rows_fn, QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc) {
  const size_t row_bytes = quant_row_bytes(type, K, "the weights of a quantised product");
  const int64_t nb = K / kQuantBlock;
  thread_local ActivationRows act;
  quantise_activations(type, M, K, A, lda, rows_fn != scalar_rows_range, act);
  // Groups of rows of W per task: each weight row is read from memory once and reused (from L1)
  // by every row of A.
  constexpr int64_t kRowsPerTask = 8;
  const int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
  const bool parallel = M * N * K >= (1 << 15) && tasks > 1;
  const ActivationRows* shared = &act;  // the calling thread's rows, read by every thread
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; ++t)
    rows_fn(type, W, row_bytes, *shared, M, t * kRowsPerTask, std::min(N, (t + 1) * kRowsPerTask),
            nb, beta, C, ldc);
}

// Rows of W dequantised per block: 256 rows x K = 4 MiB at K = 4096, reused across calls.
constexpr int64_t kDequantRows = 256;

void dequantised_gemm(QuantType type, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const uint8_t* W, float beta, float* C, int64_t ldc) {
  const size_t row_bytes = quant_row_bytes(type, K, "the weights of a quantised product");
  thread_local std::vector<float> block;
  block.resize(static_cast<size_t>(std::min(N, kDequantRows) * K));
  for (int64_t n0 = 0; n0 < N; n0 += kDequantRows) {
    const int64_t rows = std::min(kDequantRows, N - n0);
    float* b = block.data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      dequantize_rows(type, W + static_cast<size_t>(n0 + r) * row_bytes, 1, K, b + r * K, K);
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
    if (quant_kernel_available(QuantKernel::Avx512Vnni)) return QuantKernel::Avx512Vnni;
    if (quant_kernel_available(QuantKernel::Avx2)) return QuantKernel::Avx2;
    return QuantKernel::Scalar;
  }();
  return best;
}

void quant_gemm_nt(QuantType type, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const uint8_t* W, float beta, float* C, int64_t ldc) {
  if (M <= kSkinnyMaxRows)
    few_rows(rows_function(quant_kernel_best()), type, M, N, K, A, lda, W, beta, C, ldc);
  else
    dequantised_gemm(type, M, N, K, A, lda, W, beta, C, ldc);
}

void quant_gemm_nt_with(QuantKernel kernel, QuantType type, int64_t M, int64_t N, int64_t K,
                        const float* A, int64_t lda, const uint8_t* W, float beta, float* C,
                        int64_t ldc) {
  few_rows(rows_function(kernel), type, M, N, K, A, lda, W, beta, C, ldc);
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
