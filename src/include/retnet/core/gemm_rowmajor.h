#pragma once
// Products against weights used where they lie: W [N, K] row-major (row stride ldw) in float32,
// f16 or bf16, e.g. a tensor of a memory-mapped safetensors file, so a model needs no packed copy
// and opens without reading its weights.
//
// C[M,N] = A[M,K] W^T + beta C. Few rows (M <= kSkinnyMaxRows, decoding): every C[m,n] is one dot
// product accumulated in vector lanes over k = 0..K-1 and summed across lanes in a fixed order,
// whatever M is (batched results equal single-sequence results bit for bit); f16/bf16 weights are
// converted to float32 in registers (float32 accumulation). Many rows (prefill): float32 weights
// go to sgemm as they are; f16/bf16 ones are converted block by block to float32 first.
#include <cstdint>

#include "retnet/core/half.h"

namespace retnet {

// Which implementation computes the few-rows products; the best is chosen at run time from the
// CPU (cpuid), so one binary serves every x86-64 machine. The two kernels of each ISA compute the
// same sums (results equal bit for bit) and differ in how they read the weights: Avx2Prefetch and
// Avx512Prefetch prefetch the next rows in software (Intel cores); Avx2 and Avx512 (AMD cores,
// which 1-2 rows' prefetches slow down) prefetch only for 3 or more rows of A and read batch 1 as
// a few long sequential streams per thread (see the source).
enum class RowMajorKernel { Scalar, Avx2, Avx2Prefetch, Avx512, Avx512Prefetch };
const char* rowmajor_kernel_name(RowMajorKernel kernel);
bool rowmajor_kernel_available(RowMajorKernel kernel);
RowMajorKernel rowmajor_kernel_best();

void rowmajor_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const float* W, int64_t ldw, float beta, float* C, int64_t ldc);
// f16 weights (IEEE half, as uint16_t bits).
void rowmajor_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const uint16_t* W, int64_t ldw, float beta, float* C, int64_t ldc);
void rowmajor_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const BFloat16* W, int64_t ldw, float beta, float* C, int64_t ldc);

// Several row-major matrices [rows[i], K] (row stride K) used as one W [sum rows, K]: the
// separate tensors q, k, v, g of a file as one product. Part i fills C's columns after part i-1's;
// the same results as one rowmajor_gemm_nt per part, in one parallel region. 1 to
// kMaxRowMajorParts parts.
inline constexpr int kMaxRowMajorParts = 8;
void rowmajor_gemm_nt_parts(int64_t M, int64_t K, const float* A, int64_t lda, int parts,
                            const float* const* W, const int64_t* rows, float beta, float* C,
                            int64_t ldc);
void rowmajor_gemm_nt_parts(int64_t M, int64_t K, const float* A, int64_t lda, int parts,
                            const uint16_t* const* W, const int64_t* rows, float beta, float* C,
                            int64_t ldc);
void rowmajor_gemm_nt_parts(int64_t M, int64_t K, const float* A, int64_t lda, int parts,
                            const BFloat16* const* W, const int64_t* rows, float beta, float* C,
                            int64_t ldc);

// The few-rows product with a chosen kernel, for any M (tests compare the ISA paths); an Error if
// the CPU lacks it.
void rowmajor_gemm_nt_with(RowMajorKernel kernel, int64_t M, int64_t N, int64_t K, const float* A,
                           int64_t lda, const float* W, int64_t ldw, float beta, float* C,
                           int64_t ldc);
void rowmajor_gemm_nt_with(RowMajorKernel kernel, int64_t M, int64_t N, int64_t K, const float* A,
                           int64_t lda, const uint16_t* W, int64_t ldw, float beta, float* C,
                           int64_t ldc);
void rowmajor_gemm_nt_with(RowMajorKernel kernel, int64_t M, int64_t N, int64_t K, const float* A,
                           int64_t lda, const BFloat16* W, int64_t ldw, float beta, float* C,
                           int64_t ldc);

// Naive double-accumulating reference with the same contract, for tests.
void rowmajor_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                const float* W, int64_t ldw, float beta, float* C, int64_t ldc);
void rowmajor_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                const uint16_t* W, int64_t ldw, float beta, float* C, int64_t ldc);
void rowmajor_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                const BFloat16* W, int64_t ldw, float beta, float* C, int64_t ldc);

// Row n of W (row-major, row stride ldw) into out[K] as float32, times `scale` (an embedding
// looked up in a mapped table).
void rowmajor_row(const float* W, int64_t ldw, int64_t K, int64_t n, float scale, float* out);
void rowmajor_row(const uint16_t* W, int64_t ldw, int64_t K, int64_t n, float scale, float* out);
void rowmajor_row(const BFloat16* W, int64_t ldw, int64_t K, int64_t n, float scale, float* out);

}  // namespace retnet
