#pragma once
// Block-quantised weights in the layouts llama.cpp and rwkv.cpp use (ggml's Q8_0, Q4_0, Q4_1): a
// weight row of K values is cut into blocks of 32 consecutive values along K, each stored with its
// own f16 scale (and, for Q4_1, an f16 minimum):
//   Q8_0: f16 d, int8 q[32]                value = d * q                  34 bytes, 8.5 bits/weight
//   Q4_0: f16 d, 16 bytes of nibbles       value = d * (nibble - 8)       18 bytes, 4.5 bits/weight
//   Q4_1: f16 d, f16 m, 16 bytes nibbles   value = d * nibble + m         20 bytes, 5.0 bits/weight
// Nibbles as ggml packs them: byte j holds value j in its low nibble and value j + 16 in its high
// one. A quantised matrix [N, K] is N rows of K / 32 blocks, row-major; K must be a multiple of 32.
#include <cstddef>
#include <cstdint>
#include <string>

#include "retnet/core/quant_type.h"

namespace retnet {

// W [N, K] (row stride ldw) -> N * quant_row_bytes(type, K) bytes. Scales round to f16; values
// round to nearest. Non-finite weights are an Error naming `what`.
void quantize_rows(QuantType type, const float* W, int64_t N, int64_t K, int64_t ldw, uint8_t* out,
                   const std::string& what = "weights");
// The inverse: N rows of K float32 values (row stride ldo).
void dequantize_rows(QuantType type, const uint8_t* q, int64_t N, int64_t K, float* out,
                     int64_t ldo);

// Decode layout ("panels"), built at load from the ggml rows above: the rows are taken in groups
// of kQuantPanelRows = 16 (the last group padded with zero rows), and each group is stored as its
// nb blocks in turn, each block its interleaved quants and then its scales:
//   quants of block b: 64-byte words; word j holds, for each row r of the group in turn, that
//     row's bytes 4j..4j+3 of the block (Q8_0: 8 words of int8 values; Q4_0/Q4_1: 4 words of
//     nibble bytes, packed as in ggml);
//   scales of block b: the group's 16 f16 d (and, for Q4_1, then its 16 f16 m).
// So one 64-byte load (or two 32-byte ones, rows 0-7 and 8-15) holds 4 values of every row of the
// group, an int32 lane of a SIMD dot product is one row, and one 32-byte load gives the group's
// scales. A group takes exactly kQuantPanelRows ggml rows' bytes, and a product's panels are read
// front to back as one sequential stream (which hardware prefetchers follow best).
inline constexpr int64_t kQuantPanelRows = 16;
// Bytes of the panels of an [N, K] matrix (N rounded up to kQuantPanelRows).
size_t quant_panel_bytes(QuantType type, int64_t N, int64_t K);
// ggml rows [N, K] (N * quant_row_bytes contiguous bytes) -> quant_panel_bytes(type, N, K) bytes.
void pack_quant_panels(QuantType type, const uint8_t* rows, int64_t N, int64_t K, uint8_t* panels);
// Rows [n0, n0 + count) of panels back to ggml rows (count * quant_row_bytes bytes).
void unpack_quant_panels(QuantType type, const uint8_t* panels, int64_t K, int64_t n0, int64_t count,
                         uint8_t* rows);
// Rows [n0, n0 + count) of panels dequantised to float32 (row stride ldo).
void dequantize_panel_rows(QuantType type, const uint8_t* panels, int64_t K, int64_t n0,
                           int64_t count, float* out, int64_t ldo);

// Which implementation computes the integer dot products of quant_gemm_nt: AVX2, AVX-512 VNNI on
// 256-bit vectors (a group's two halves of 8 rows in turn) or on 512-bit ones (all 16 rows in one
// register). Best is chosen at run time from the CPU (cpuid), so one binary serves every x86-64
// machine.
enum class QuantKernel { Scalar, Avx2, Avx512Vnni, Avx512Vnni512 };
const char* quant_kernel_name(QuantKernel kernel);
bool quant_kernel_available(QuantKernel kernel);
QuantKernel quant_kernel_best();

// C[M,N] = A[M,K] W^T + beta C with W quantised [N, K] in panels (quant_panel_bytes). Few rows
// (M <= kSkinnyMaxRows, decoding): each row of A is quantised to int8 per block of 32 (ggml's Q8
// activation path) and every C[m,n] is a sum over blocks, in block order, of fma(d_w * d_a,
// integer block dot product, sum) (then fma(m_w, d_a * sum(q_a), sum) for Q4_1): the same
// operations whatever M is and whichever rows it is computed with (batch-invariant), on every
// kernel (the SIMD ones equal the scalar one bit for bit). Many rows (prefill): blocks of W are
// dequantised to float32 and multiplied by sgemm with A in float32.
void quant_gemm_nt(QuantType type, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const uint8_t* W, float beta, float* C, int64_t ldc);
// The few-rows product with a chosen kernel, for any M (tests compare the ISA paths); an Error if
// the CPU lacks it. W in panels.
void quant_gemm_nt_with(QuantKernel kernel, QuantType type, int64_t M, int64_t N, int64_t K,
                        const float* A, int64_t lda, const uint8_t* W, float beta, float* C,
                        int64_t ldc);
// Naive reference on ggml rows (not panels): A in float32 times the dequantised W, accumulated in
// double.
void quant_gemm_nt_reference(QuantType type, int64_t M, int64_t N, int64_t K, const float* A,
                             int64_t lda, const uint8_t* W, float beta, float* C, int64_t ldc);

}  // namespace retnet
