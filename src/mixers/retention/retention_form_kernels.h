#pragma once
// Per-level entry points of retention_form_kernels.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): the loops of retention's parallel, chunkwise and scan forms and of
// their backward passes outside their matrix products (retention.cpp and retention_backward.cpp
// call the variant of kernel_isa()).
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// Rows [n0, n1) of a causal score block P (rows `ld` floats apart, `cols` columns): row n keeps
// columns [0, n] times the decay, p[m] *= gp[n - m], and zeroes (n, cols). With row_sums,
// row_sums[n] = the sum of the kept p[m], added in order of m.
RETNET_ISA_DECLARE(void retention_decay_mask(float* P, int64_t ld, int64_t n0, int64_t n1,
                                             int64_t cols, const float* gp, float* row_sums))
// dst[r * ldd + c] = src[r * lds + c] * factor[r * factor_step] for `rows` rows of `cols`
// (factor_step -1 walks the factors backwards; dst may be src).
RETNET_ISA_DECLARE(void retention_scale_rows(const float* src, int64_t lds, float* dst,
                                             int64_t ldd, int64_t rows, int64_t cols,
                                             const float* factor, int64_t factor_step))
// y[e] = a * x[e] + y[e] over n floats: the scan's combine of two spans.
RETNET_ISA_DECLARE(void retention_scale_add(float* y, const float* x, float a, int64_t n))
// aug[j] = sum_i q[i] X[i * W + j] over Dk rows of W (added in order of i): a state read by its
// query.
RETNET_ISA_DECLARE(void retention_read_state(const float* X, int64_t W, int64_t Dk,
                                             const float* q, float* aug))

}  // namespace retnet
