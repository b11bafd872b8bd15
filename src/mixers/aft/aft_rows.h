#pragma once
// Per-level entry points of aft_rows.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): AFT-full's loops over channels, whose exponentials are most of its
// time. aft.cpp and aft_backward.cpp call the variant of kernel_isa().
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// Keys m in [m0, m1) (k rows at k + m * ldk, v rows at v + m * ldv, `width` channels) folded in
// order into the online softmax (M, num, den) of the query at position n, each with the position
// bias of its distance n - m (bias: L entries).
RETNET_ISA_DECLARE(void aft_fold_keys(const float* k, int64_t ldk, const float* v, int64_t ldv,
                                      int64_t m0, int64_t m1, int64_t n, const float* bias,
                                      int64_t L, float* M, float* num, float* den, int64_t width))
// out[c] = sigmoid(q[c]) num[c] / den[c] for c < width.
RETNET_ISA_DECLARE(void aft_gated_ratio(const float* q, const float* num, const float* den,
                                        float* out, int64_t width))
// out [C] = sigmoid(q) N / D from S partial softmaxes (partials[s] = [3, C]: max, numerator,
// denominator), merged channel by channel.
RETNET_ISA_DECLARE(void aft_merge_partials(const float* partials, int64_t S, int64_t C,
                                           const float* q, float* out))

// One query row n of the backward against its keys m in [m0, m1): q, d_out and the forward's
// saved row_max, ratio and denominator at the row's `width` channels; the keys' gradient
// accumulators dk, dv ([m1 - m0] rows `ld_acc` apart); d_bias (L doubles) per distance.
struct AftBackwardRow {
  const float *q, *d_out, *row_max, *ratio, *denominator;
  const float *k, *v;  // rows m at k + m * ldk, v + m * ldv
  int64_t ldk, ldv;
  float *dk, *dv;
  int64_t ld_acc;
};
// g (width floats) and inv_den (width floats) are scratch.
RETNET_ISA_DECLARE(void aft_backward_row(const AftBackwardRow& r, int64_t n, int64_t m0,
                                         int64_t m1, const float* bias, int64_t L, float* g,
                                         float* inv_den, double* d_bias, int64_t width))
// d_q[c] += d_out[c] r[c] sigmoid'(q[c]) for c < C.
RETNET_ISA_DECLARE(void aft_query_grad_row(const float* q, const float* d_out, const float* r,
                                           float* d_q, int64_t C))

}  // namespace retnet
