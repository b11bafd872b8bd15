// Products against block-quantised weights (retnet/core/quant.h).
//
// Decoding (few rows): like ggml, each activation row is quantised to int8 per block of 32 (scale
// d_a = max|a| / 127), so a block's contribution is one integer dot product times d_w * d_a (plus
// m_w * d_a * sum(q_a) for Q4_1's minimum). The integer dot products use AVX2's maddubs/madd or
// AVX-512 VNNI's dpbusd, picked at run time from cpuid, or plain C++. Every C[m,n] is one call of
// the same dot function over the same bytes whatever M is: batch-invariant.
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

// Activation rows quantised to int8 blocks: q [M][K], scale d and d * sum(q) per block.
struct QuantisedRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

void quantise_activations(int64_t M, int64_t K, const float* A, int64_t lda, QuantisedRows& out) {
  const int64_t nb = K / kQuantBlock;
  out.q.resize(static_cast<size_t>(M * K));
  out.d.resize(static_cast<size_t>(M * nb));
  out.s.resize(static_cast<size_t>(M * nb));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* a = A + m * lda + b * kQuantBlock;
      int8_t* q = out.q.data() + m * K + b * kQuantBlock;
      float amax = 0.f;
      for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(a[i]));
      for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::isnan(a[i]) ? a[i] : amax;
      int sum = 0;
      float d;
      if (!std::isfinite(amax)) {  // NaN/Inf in the input: the block's products come out NaN
        d = std::nanf("");
        std::memset(q, 0, kQuantBlock);
      } else {
        d = amax / 127.f;
        const float id = d != 0.f ? 1.f / d : 0.f;
        for (int64_t i = 0; i < kQuantBlock; ++i) {
          q[i] = static_cast<int8_t>(std::nearbyint(a[i] * id));
          sum += q[i];
        }
      }
      out.d[m * nb + b] = d;
      out.s[m * nb + b] = d * static_cast<float>(sum);
    }
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// One weight row (nb blocks) dotted with one quantised activation row.
float dot_scalar(QuantType type, const uint8_t* w, const int8_t* qa, const float* da,
                 const float* sa, int64_t nb) {
  const int64_t block_bytes = quant_block_bytes(type);
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b, w += block_bytes, qa += kQuantBlock) {
    const float dw = half_at(w);
    int isum = 0;
    if (type == QuantType::Q8_0) {
      for (int64_t i = 0; i < kQuantBlock; ++i) isum += static_cast<int8_t>(w[2 + i]) * qa[i];
      acc += dw * da[b] * static_cast<float>(isum);
    } else {
      const uint8_t* qs = w + (type == QuantType::Q4_1 ? 4 : 2);
      const int offset = type == QuantType::Q4_0 ? 8 : 0;
      for (int64_t j = 0; j < kQuantBlock / 2; ++j)
        isum += ((qs[j] & 0x0f) - offset) * qa[j] + ((qs[j] >> 4) - offset) * qa[j + 16];
      acc += dw * da[b] * static_cast<float>(isum);
      if (type == QuantType::Q4_1) acc += half_at(w + 2) * sa[b];
    }
  }
  return acc;
}

#if defined(__x86_64__)
#define RETNET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RETNET_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

RETNET_AVX2 inline float half_at_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// 16 bytes of nibbles -> 32 bytes 0..15, in value order (low nibbles, then high nibbles).
RETNET_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}
RETNET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The dot product of a block, unsigned x signed bytes summed into 8 int32 lanes: AVX2 needs
// maddubs (pairs to int16, cannot overflow here: |q_w| <= 127 or 15, |q_a| <= 127) and madd;
// VNNI does it in one instruction. Signed x signed moves x's sign onto y (maddubs and dpbusd take
// one unsigned operand). Two accumulators (even and odd blocks) hide the FMA latency; the order
// is fixed per row. The body is written once, instantiated under each ISA's target attribute.
#define RETNET_QUANT_DOT(NAME, TARGET, U8S8)                                                    \
  TARGET float NAME(QuantType type, const uint8_t* w, const int8_t* qa, const float* da,         \
                    const float* sa, int64_t nb) {                                               \
    const int64_t block_bytes = quant_block_bytes(type);                                         \
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                  \
    float minimum = 0.f;                                                                          \
    for (int64_t b = 0; b < nb; ++b, w += block_bytes, qa += kQuantBlock) {                      \
      __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa)), x;                   \
      if (type == QuantType::Q4_1) {                                                              \
        x = unpack_nibbles(w + 4);                                                               \
        minimum += half_at_f16c(w + 2) * sa[b];                                                  \
      } else {                                                                                    \
        x = type == QuantType::Q8_0                                                               \
                ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2))                    \
                : _mm256_sub_epi8(unpack_nibbles(w + 2), _mm256_set1_epi8(8));                   \
        a = _mm256_sign_epi8(a, x);                                                               \
        x = _mm256_sign_epi8(x, x);                                                               \
      }                                                                                           \
      const __m256 p = _mm256_cvtepi32_ps(U8S8(x, a));                                           \
      acc[b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(half_at_f16c(w) * da[b]), p, acc[b & 1]);      \
    }                                                                                             \
    return hsum(_mm256_add_ps(acc[0], acc[1])) + minimum;                                        \
  }

RETNET_AVX2 inline __m256i u8s8_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
RETNET_VNNI inline __m256i u8s8_vnni(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
RETNET_QUANT_DOT(dot_avx2, RETNET_AVX2, u8s8_avx2)
RETNET_QUANT_DOT(dot_vnni, RETNET_VNNI, u8s8_vnni)
#undef RETNET_QUANT_DOT
#endif

using DotFn = float (*)(QuantType, const uint8_t*, const int8_t*, const float*, const float*,
                        int64_t);

DotFn dot_function(QuantKernel kernel) {
  RETNET_CHECK(quant_kernel_available(kernel),
               "the {} kernel for quantised weights needs a CPU feature this machine lacks",
               quant_kernel_name(kernel));
#if defined(__x86_64__)
  if (kernel == QuantKernel::Avx512Vnni) return dot_vnni;
  if (kernel == QuantKernel::Avx2) return dot_avx2;
#endif
  return dot_scalar;
}

void few_rows(DotFn dot, QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc) {
  const size_t row_bytes = quant_row_bytes(type, K, "the weights of a quantised product");
  const int64_t nb = K / kQuantBlock;
  thread_local QuantisedRows act;
  quantise_activations(M, K, A, lda, act);
  const int8_t* qa = act.q.data();
  const float *da = act.d.data(), *sa = act.s.data();
  // Groups of rows of W per task: each weight row is read from memory once and reused (from L1)
  // by every row of A.
  constexpr int64_t kRowsPerTask = 8;
  const int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
  const bool parallel = M * N * K >= (1 << 15) && tasks > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t n1 = std::min(N, (t + 1) * kRowsPerTask);
    for (int64_t n = t * kRowsPerTask; n < n1; ++n) {
      const uint8_t* w = W + static_cast<size_t>(n) * row_bytes;
      for (int64_t m = 0; m < M; ++m) {
        const float v = dot(type, w, qa + m * K, da + m * nb, sa + m * nb, nb);
        float& c = C[m * ldc + n];
        c = beta == 0.f ? v : v + beta * c;
      }
    }
  }
}

// Rows of W dequantised per block: 256 rows x K = 4 MiB at K = 4096, reused across calls.
constexpr int64_t kDequantRows = 256;

void dequantised_gemm(QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc) {
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
    few_rows(dot_function(quant_kernel_best()), type, M, N, K, A, lda, W, beta, C, ldc);
  else
    dequantised_gemm(type, M, N, K, A, lda, W, beta, C, ldc);
}

void quant_gemm_nt_with(QuantKernel kernel, QuantType type, int64_t M, int64_t N, int64_t K,
                        const float* A, int64_t lda, const uint8_t* W, float beta, float* C,
                        int64_t ldc) {
  few_rows(dot_function(kernel), type, M, N, K, A, lda, W, beta, C, ldc);
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
