#pragma once
// Internal (src/include): what the CPU kernels do with a Weight (retnet/model/weight.h), whatever
// its element type and placement: the product, its rows as float32, and embedding lookups.
#include <cstdint>

#include "retnet/model/weight.h"

namespace retnet {

// y[M, N] = x[M, K] W^T + beta y. Dispatches by placement, element type and row count: panels
// (packed or quantised GEMM, batch-invariant up to kSkinnyMaxRows rows; f32 panels with their
// float32 rows kept use sgemm above that), in-place rows (row-major GEMM over the stored tensors)
// or plain rows (sgemm, or the row-major GEMM for half types); each kernel picks its own ISA. An
// in-place weight's values are scanned for non-finite numbers on first use.
void matmul(const Weight& w, int64_t M, const float* x, int64_t ldx, float beta, float* y,
            int64_t ldy);

// Row n of W into out[K] as float32, times `scale`.
void weight_row(const Weight& w, int64_t n, float scale, float* out);

// x[N, K] = scale * rows tokens[N] of W (ids already checked): an embedding lookup.
void embed_rows(const Weight& w, const int32_t* tokens, int64_t N, float scale, float* x);

// Throws Error naming the tensor if an in-place part holds a NaN or an infinity; each part is
// scanned on the first call only (later calls return at once). Other placements: nothing to do
// (their values were checked as they were packed or converted).
void check_finite_in_place(const Weight& w);

}  // namespace retnet
