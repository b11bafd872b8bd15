#pragma once
// GEMM wrapper over a BLAS library loaded at run time.
//
// Why at run time: Debian's OpenBLAS 0.3.21 does not recognise recent CPUs and silently falls back
// to SSE3 kernels (several times slower) unless OPENBLAS_CORETYPE is set before the library is
// loaded. Loading it ourselves lets the engine set the core type from cpuid first, for every front
// end (CLI, library, Python), with no wrapper script. See docs/gemm.md for the measurements.
#include <cstdint>
#include <string>

#include "retnet/core/half.h"

namespace retnet {

enum class Trans : bool { No = false, Yes = true };

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
// op(A) is A [M,K] (lda >= K) or A^T with A stored [K,M] (lda >= M); likewise for B.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc);

// Row-major y[M] = alpha * A[M,N] x + beta * y, or with A^T (y[N] = alpha * A^T x + beta * y).
void sgemv(Trans trans_a, int64_t M, int64_t N, float alpha, const float* A, int64_t lda,
           const float* x, float beta, float* y);

// Prefill against weights stored in another type (f16/bf16 rows used in place, quantised blocks):
// rows of W are converted to float32 a block at a time and handed to sgemm, which packs A again for
// every block, so blocks must be large (docs/design-notes.md#converted-prefill-blocks). A block
// holds at most kConvertedBlockBytes of float32, a whole number of 64 rows (at least 64).
inline constexpr int64_t kConvertedBlockBytes = int64_t{32} << 20;
inline int64_t converted_block_rows(int64_t N, int64_t K) {
  const int64_t row_bytes = static_cast<int64_t>(sizeof(float)) * (K > 0 ? K : 1);
  const int64_t fit = kConvertedBlockBytes / row_bytes;
  const int64_t rows = fit < 64 ? 64 : fit / 64 * 64;
  return rows < N ? rows : N;
}

// C[M,N] = A[M,K] B[N,K]^T + beta C for few rows (decoding: M sequences, B a weight matrix):
// each weight row read once for all M rows, rows split across threads, and every C[m,n] computed
// in the same order whatever M is (batched results equal single-sequence ones bit for bit).
// sgemm hands (No, Yes) products with M <= kSkinnyMaxRows and alpha = 1 to it.
inline constexpr int64_t kSkinnyMaxRows = 64;
void skinny_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc);

// Weights packed for products of few rows (decoding): W [N, K] (row stride ldw) as panels of 16
// output columns, [ceil(N/16)][K][16], zero-padded; float32, f16 or bf16. packed_gemm_nt computes
// C[M,N] = A[M,K] W^T + beta C from them with broadcast-FMA panels (no horizontal sums), each
// C[m,n] summed over k in order whatever M is: batch-invariant like skinny_gemm_nt, and efficient
// at every batch size up to kSkinnyMaxRows. Above that (prefill) blocks of panels are unpacked to
// float32 and multiplied by sgemm, so one packed copy serves every product. f16/bf16 weights are
// converted to float32 in registers: float32 accumulation.
int64_t packed_panels(int64_t N);
size_t packed_weight_elements(int64_t N, int64_t K);
void pack_weights(const float* weights, int64_t N, int64_t K, int64_t ldw, float* out);
void pack_weights_f16(const float* weights, int64_t N, int64_t K, int64_t ldw, uint16_t* out);
void packed_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* packed, float beta, float* C, int64_t ldc);
void packed_gemm_nt_f16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                        const uint16_t* packed, float beta, float* C, int64_t ldc);
void pack_weights_bf16(const float* weights, int64_t N, int64_t K, int64_t ldw, BFloat16* out);
void packed_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const BFloat16* packed, float beta, float* C, int64_t ldc);
// Row n of a packed matrix W [N, K] (its element k sits at panel n/16, lane n%16) into out[K],
// times `scale`: a tied embedding looks its rows up in the LM head's panels.
void packed_row(const float* packed, int64_t K, int64_t n, float scale, float* out);
void packed_row(const uint16_t* packed, int64_t K, int64_t n, float scale, float* out);
void packed_row(const BFloat16* packed, int64_t K, int64_t n, float scale, float* out);
// Naive double-accumulating products over packed weights (any M), for tests.
void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const float* packed, float beta, float* C, int64_t ldc);
void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const uint16_t* packed, float beta, float* C, int64_t ldc);
void packed_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                              const BFloat16* packed, float beta, float* C, int64_t ldc);

// Naive double-accumulating reference with the same contract, for tests.
void sgemm_reference(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                     int64_t ldc);

void blas_set_num_threads(int n);

struct BlasInfo {
  std::string library;   // path that was loaded
  std::string coretype;  // OPENBLAS_CORETYPE in effect ("" if left to the library)
  std::string corename;  // what the library reports it runs (openblas_get_corename)
  std::string config;    // openblas_get_config
};
// Loads the library on first use; throws Error if no BLAS can be loaded.
const BlasInfo& blas_info();

}  // namespace retnet
