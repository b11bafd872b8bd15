// Products with few rows, C[M,N] = A[M,K] B[N,K]^T + beta C for M <= kSkinnyMaxRows: decoding's
// projections (M = sequences in the batch, B = a weight matrix [out, in]). Two reasons to own it:
// - speed: OpenBLAS's sgemm is slow on one row and its sgemv is not fused across rows; here each
//   weight row is loaded once per step for the whole batch and rows are split across threads;
// - batch invariance: every C[m,n] is one dot product accumulated in the same order whatever M
//   is, so a sequence decoded in a batch gets bit for bit the logits it gets alone.
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their "undefined" register idiom in
// _mm512_reduce_add_ps); the warning is about the headers, not this code.
// Compiled once per instruction-set level (retnet/core/isa_kernels.h); isa_kernels.cpp picks one.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include <immintrin.h>

#include <algorithm>

#include "retnet/core/gemm.h"
#include "retnet/core/isa_kernels.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

#if defined(__AVX512F__)
// Horizontal sum in a fixed order (the same for every m, n).
inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

// C[m, n0..n0+R) for rows m0..m0+4 of A (fewer at the end: `mrows`), weight rows n0..n0+R.
template <int R, typename W>
void block(const float* A, int64_t lda, const W* B, int64_t ldb, float beta, float* C,
           int64_t ldc, int64_t K, int64_t m0, int64_t mrows, int64_t n0) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < 4; ++m) acc[r][m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = load16(B + (n0 + r) * ldb + k);
    for (int m = 0; m < 4; ++m) {
      if (m >= mrows) break;
      const __m512 x = _mm512_loadu_ps(A + (m0 + m) * lda + k);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(w[r], x, acc[r][m]);
    }
  }
  if (k < K) {  // tail: masked loads read nothing past the row
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = load16(B + (n0 + r) * ldb + k, mask);
    for (int m = 0; m < mrows; ++m) {
      const __m512 x = _mm512_maskz_loadu_ps(mask, A + (m0 + m) * lda + k);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(w[r], x, acc[r][m]);
    }
  }
  for (int m = 0; m < mrows; ++m)
    for (int r = 0; r < R; ++r) {
      float* c = C + (m0 + m) * ldc + n0 + r;
      const float dot = hsum(acc[r][m]);
      *c = beta == 0.f ? dot : dot + beta * *c;
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
// Horizontal sum in a fixed order (the same for every m, n).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Weight rows n0..n0+R (R <= 2: 8 accumulators, two weight rows and one row of A in registers).
template <int R>
void pair_block(const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc, int64_t K, int64_t m0, int64_t mrows, int64_t n0) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < 4; ++m) acc[r][m] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_loadu_ps(B + (n0 + r) * ldb + k);
    for (int m = 0; m < 4; ++m) {
      if (m >= mrows) break;
      const __m256 x = _mm256_loadu_ps(A + (m0 + m) * lda + k);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(w[r], x, acc[r][m]);
    }
  }
  if (k < K) {  // tail: masked loads read nothing past the row
    const __m256i mask = lane_mask(K - k);
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_maskload_ps(B + (n0 + r) * ldb + k, mask);
    for (int m = 0; m < mrows; ++m) {
      const __m256 x = _mm256_maskload_ps(A + (m0 + m) * lda + k, mask);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(w[r], x, acc[r][m]);
    }
  }
  for (int m = 0; m < mrows; ++m)
    for (int r = 0; r < R; ++r) {
      float* c = C + (m0 + m) * ldc + n0 + r;
      const float dot = hsum(acc[r][m]);
      *c = beta == 0.f ? dot : dot + beta * *c;
    }
}

template <int R, typename W>
void block(const float* A, int64_t lda, const W* B, int64_t ldb, float beta, float* C,
           int64_t ldc, int64_t K, int64_t m0, int64_t mrows, int64_t n0) {
  for (int r = 0; r + 2 <= R; r += 2)
    pair_block<2>(A, lda, B, ldb, beta, C, ldc, K, m0, mrows, n0 + r);
  if (R % 2) pair_block<1>(A, lda, B, ldb, beta, C, ldc, K, m0, mrows, n0 + R - 1);
}
#else
template <int R, typename W>
void block(const float* A, int64_t lda, const W* B, int64_t ldb, float beta, float* C,
           int64_t ldc, int64_t K, int64_t m0, int64_t mrows, int64_t n0) {
  for (int64_t m = 0; m < mrows; ++m)
    for (int r = 0; r < R; ++r) {
      const float* a = A + (m0 + m) * lda;
      const W* b = B + (n0 + r) * ldb;
      float lanes[16] = {};
      for (int64_t k = 0; k < K; ++k) lanes[k % 16] += a[k] * b[k];
      float dot = 0;
      for (float l : lanes) dot += l;
      float* c = C + (m0 + m) * ldc + n0 + r;
      *c = beta == 0.f ? dot : dot + beta * *c;
    }
}
#endif

// Weight rows per task: 4 at a time (4 rows x 4 batch rows = 16 accumulators in registers).
constexpr int64_t kRowsPerBlock = 4;

template <typename W>
void skinny(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* B, int64_t ldb,
            float beta, float* C, int64_t ldc) {
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  // Threads only when the product is worth a fork (measured: below ~32k multiply-adds per
  // call one thread wins).
  const bool parallel = N * K >= (1 << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t n0 = blk * kRowsPerBlock, rows = std::min(kRowsPerBlock, N - n0);
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int64_t mrows = std::min<int64_t>(4, M - m0);
      if (rows == kRowsPerBlock) {
        block<4, W>(A, lda, B, ldb, beta, C, ldc, K, m0, mrows, n0);
      } else {
        for (int64_t r = 0; r < rows; ++r)
          block<1, W>(A, lda, B, ldb, beta, C, ldc, K, m0, mrows, n0 + r);
      }
    }
  }
}

}  // namespace

void skinny_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float beta, float* C, int64_t ldc) {
  skinny(M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
