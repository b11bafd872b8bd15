// Weights packed for products with few rows: C[M,N] = A[M,K] W[N,K]^T + beta C, W stored as panels
// of 16 output columns, [ceil(N/16)][K][16] (zero-padded), float32, f16 or bf16. Packing, the
// prefill path and the level choice live here; the few-row kernels, one variant per instruction-set
// level, in gemm_packed_kernels.cpp.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/isa_kernels.h"

namespace retnet {
namespace {

constexpr int64_t kPanel = 16;  // output columns per panel (one AVX-512 register)

inline float to_float(float w) { return w; }
inline float to_float(uint16_t w) { return half_to_float(w); }
inline float to_float(BFloat16 w) { return bf16_to_float(w.bits); }

template <typename W>
using FewRowsFn = void (*)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                           const W* packed, float beta, float* C, int64_t ldc);

template <typename W>
FewRowsFn<W> few_rows_kernel(Isa level) {
  if constexpr (std::is_same_v<W, float>)
    return RETNET_ISA_VARIANT(level, packed_rows_f32);
  else if constexpr (std::is_same_v<W, uint16_t>)
    return RETNET_ISA_VARIANT(level, packed_rows_f16);
  else
    return RETNET_ISA_VARIANT(level, packed_rows_bf16);
}

template <typename W, typename Convert>
void pack(const float* weights, int64_t N, int64_t K, int64_t ldw, W* out, Convert convert) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < packed_panels(N); ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPanel; ++j) {
        const int64_t n = p * kPanel + j;
        out[(p * K + k) * kPanel + j] = n < N ? convert(weights[n * ldw + k]) : convert(0.f);
      }
}

// Many rows (prefill): the packed kernel would stream A once per 64 outputs, so instead a block
// of panels is unpacked to float32 [K][columns] (converting f16/bf16 on the way) and handed to
// sgemm. The unpacking is O(N K) against the product's O(M N K): a few percent at 512 rows.
// The block is as wide as converted_block_rows allows (32 MiB, reused across calls): sgemm packs
// A again for every call, so narrow blocks cost prefill speed
// (docs/design-notes.md#converted-prefill-blocks).
template <typename W>
void unpacked_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* packed,
                   float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> block;
  const int64_t panels = packed_panels(N);
  const int64_t block_panels = (converted_block_rows(N, K) + kPanel - 1) / kPanel;
  for (int64_t p0 = 0; p0 < panels; p0 += block_panels) {
    const int64_t P = std::min(block_panels, panels - p0), width = P * kPanel;
    if (block.size() < static_cast<size_t>(K * width)) block.resize(static_cast<size_t>(K * width));
    float* b = block.data();
#pragma omp parallel for schedule(static) if (K * width >= (1 << 16))
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p) {
        const W* src = packed + ((p0 + p) * K + k) * kPanel;
        float* dst = b + k * width + p * kPanel;
#pragma omp simd
        for (int64_t j = 0; j < kPanel; ++j) dst[j] = to_float(src[j]);
      }
    const int64_t n0 = p0 * kPanel, cols = std::min(width, N - n0);
    sgemm(Trans::No, Trans::No, M, cols, K, 1.f, A, lda, b, width, beta, C + n0, ldc);
  }
}

template <typename W>
void product(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* packed,
             float beta, float* C, int64_t ldc) {
  static const FewRowsFn<W> few_rows = few_rows_kernel<W>(kernel_isa());
  if (M <= kSkinnyMaxRows)
    few_rows(M, N, K, A, lda, packed, beta, C, ldc);
  else
    unpacked_gemm(M, N, K, A, lda, packed, beta, C, ldc);
}

template <typename W>
void row_of(const W* packed, int64_t K, int64_t n, float scale, float* out) {
  const W* w = packed + (n / kPanel) * K * kPanel + n % kPanel;
  for (int64_t k = 0; k < K; ++k) out[k] = scale * to_float(w[k * kPanel]);
}

template <typename W>
void reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* packed,
               float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(A[m * lda + k]) *
               to_float(packed[((n / kPanel) * K + k) * kPanel + n % kPanel]);
      float& c = C[m * ldc + n];
      c = static_cast<float>(beta == 0.f ? acc : acc + static_cast<double>(beta) * c);
    }
}

}  // namespace

int64_t packed_panels(int64_t N) { return (N + kPanel - 1) / kPanel; }
size_t packed_weight_elements(int64_t N, int64_t K) {
  return static_cast<size_t>(packed_panels(N) * K * kPanel);
}

void pack_weights(const float* weights, int64_t N, int64_t K, int64_t ldw, float* out) {
  pack(weights, N, K, ldw, out, [](float x) { return x; });
}

void pack_weights_f16(const float* weights, int64_t N, int64_t K, int64_t ldw, uint16_t* out) {
  pack(weights, N, K, ldw, out, [](float x) { return float_to_half(x); });
}

void pack_weights_bf16(const float* weights, int64_t N, int64_t K, int64_t ldw, BFloat16* out) {
  pack(weights, N, K, ldw, out, [](float x) { return BFloat16{float_to_bf16(x)}; });
}

void packed_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* packed, float beta, float* C, int64_t ldc) {
  product(M, N, K, A, lda, packed, beta, C, ldc);
}

void packed_gemm_nt_f16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                        const uint16_t* packed, float beta, float* C, int64_t ldc) {
  product(M, N, K, A, lda, packed, beta, C, ldc);
}

void packed_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const BFloat16* packed, float beta, float* C, int64_t ldc) {
  product(M, N, K, A, lda, packed, beta, C, ldc);
}

void packed_row(const float* packed, int64_t K, int64_t n, float scale, float* out) {
  row_of(packed, K, n, scale, out);
}
void packed_row(const uint16_t* packed, int64_t K, int64_t n, float scale, float* out) {
  row_of(packed, K, n, scale, out);
}
void packed_row(const BFloat16* packed, int64_t K, int64_t n, float scale, float* out) {
  row_of(packed, K, n, scale, out);
}

#define RETNET_PACKED_AT(W)                                                                       \
  void packed_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, \
                         const W* packed, float beta, float* C, int64_t ldc) {                    \
    RETNET_CHECK(level <= cpu_isa(), "packed_gemm_nt_at: level {} above this CPU's {}",           \
                 isa_name(level), isa_name(cpu_isa()));                                           \
    RETNET_CHECK(M <= kSkinnyMaxRows, "packed_gemm_nt_at: M = {} above {}", M, kSkinnyMaxRows);   \
    few_rows_kernel<W>(level)(M, N, K, A, lda, packed, beta, C, ldc);                             \
  }
RETNET_PACKED_AT(float)
RETNET_PACKED_AT(uint16_t)
RETNET_PACKED_AT(BFloat16)
#undef RETNET_PACKED_AT

void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const float* packed, float beta, float* C, int64_t ldc) {
  reference(M, N, K, A, lda, packed, beta, C, ldc);
}
void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const uint16_t* packed, float beta, float* C, int64_t ldc) {
  reference(M, N, K, A, lda, packed, beta, C, ldc);
}
void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const BFloat16* packed, float beta, float* C, int64_t ldc) {
  reference(M, N, K, A, lda, packed, beta, C, ldc);
}

}  // namespace retnet
