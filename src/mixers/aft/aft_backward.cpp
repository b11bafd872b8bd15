// Backward pass of AFT-full: no [T, T] buffer; each weight p_nmc = exp(w_nm + k_mc - M_nc) / D_nc
// recomputed exactly from the forward's saved maximum and denominator (the same float sum w + k
// as the forward, so the largest exponent is exactly 0 again).
//
// With g_nc = d_out_nc sigmoid(q_nc) and r_nc the saved ungated output:
//   d_q_nc += d_out_nc r_nc s(1 - s),   d_v_mc += sum_n p_nmc g_nc,
//   d_k_mc += sum_n p_nmc g_nc (v_mc - r_nc),   d_bias[min(n - m, L - 1)] += sum_c (the same).
// Tasks are (sequence, channel block, key tile) walking the queries at or after the tile, so each
// task owns its d_k and d_v rows; d_bias, shared by all, is summed per thread in double.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "aft_kernels.h"
#include "aft_rows.h"
#include "retnet/core/error.h"
#include "retnet/mixers/aft.h"

namespace retnet {
namespace {

using namespace aft_detail;

// One sequence's operands (rows of T tokens, strides ld*; saved rows C floats apart).
struct GradSequence {
  const float *q, *k, *v, *d_out, *row_max, *denominator, *ratio;
  float *d_k, *d_v;
  int64_t ldq, ldk, ldv, ld_do, ld_dk, ld_dv;
};

// Per thread: d_k and d_v accumulators [tile, kAftChannelBlock], the query row's g and 1 / D
// [kAftChannelBlock], and the d_bias partial (L doubles).
size_t backward_scratch(int64_t tile, int64_t L) {
  return Arena::footprint(2 * tile * kAftChannelBlock + 2 * kAftChannelBlock) +
         Arena::footprint(2 * L);
}

// Key rows [j0, j0 + Lk) and channels [c0, c0 + width) against every query that sees them.
void backward_key_tile(const GradSequence& s, int64_t j0, int64_t Lk, int64_t c0, int64_t width,
                       int64_t T, int64_t C, const float* bias, int64_t L, float* scratch,
                       double* d_bias) {
  constexpr int64_t W = kAftChannelBlock;
  float* dk = scratch;
  float* dv = dk + Lk * W;
  float* g = dv + Lk * W;
  float* inv_den = g + W;
  std::fill(dk, dk + 2 * Lk * W, 0.f);
  static const auto backward_row = RETNET_ISA_VARIANT(kernel_isa(), aft_backward_row);
  for (int64_t n = j0; n < T; ++n) {
    const AftBackwardRow row{s.q + n * s.ldq + c0,
                             s.d_out + n * s.ld_do + c0,
                             s.row_max + n * C + c0,
                             s.ratio + n * C + c0,
                             s.denominator + n * C + c0,
                             s.k + c0,
                             s.v + c0,
                             s.ldk,
                             s.ldv,
                             dk,
                             dv,
                             W};
    backward_row(row, n, j0, std::min(j0 + Lk, n + 1), bias, L, g, inv_den, d_bias, width);
  }
  for (int64_t m = 0; m < Lk; ++m) {
    float* d_k = s.d_k + (j0 + m) * s.ld_dk + c0;
    float* d_v = s.d_v + (j0 + m) * s.ld_dv + c0;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      d_k[c] += dk[m * W + c];
      d_v[c] += dv[m * W + c];
    }
  }
}

}  // namespace

size_t aft_backward_workspace_floats(int64_t L, int64_t tile) {
  return backward_scratch(std::max<int64_t>(tile, 1), std::max<int64_t>(L, 1)) * thread_slots();
}

void aft_backward(const AftGradArgs& a, Arena& arena) {
  const Dims d = check_dims(a.q, a.k, a.v, a.d_out, "aft_backward");
  const Dims dg = check_dims(a.d_q, a.d_k, a.d_v, a.d_out, "aft_backward (gradients)");
  RETNET_CHECK(dg.B == d.B && dg.T == d.T && dg.C == d.C,
               "aft_backward: gradients [{}, {}, {}] do not match q [{}, {}, {}]", dg.B, dg.T, dg.C,
               d.B, d.T, d.C);
  check_bias(a.bias, a.L, "aft_backward");
  RETNET_CHECK(a.d_bias != nullptr, "aft_backward: no d_bias buffer");
  RETNET_CHECK(a.row_max && a.denominator && a.ratio,
               "aft_backward needs the forward's saved row_max, denominator and ratio");
  RETNET_CHECK(a.tile >= 1, "aft_backward: tile must be at least 1, got {}", a.tile);
  if (d.B == 0 || d.T == 0) return;
  const int64_t tile = a.tile, L = a.L;
  const int64_t key_tiles = (d.T + tile - 1) / tile;
  const int64_t blocks = channel_blocks(d.C, kAftChannelBlock);
  const int64_t tasks = d.B * blocks * key_tiles;
  const size_t per_slot = backward_scratch(tile, L), slots = thread_slots();
  const size_t bias_offset = per_slot - Arena::footprint(2 * L);
  float* scratch = arena.alloc(per_slot * slots);
  // Every slot's partial is zeroed, so slots of threads that get no task add nothing.
  auto bias_partial = [&](size_t slot) {
    return reinterpret_cast<double*>(scratch + per_slot * slot + bias_offset);  // 64-byte aligned
  };
  for (size_t th = 0; th < slots; ++th) std::fill(bias_partial(th), bias_partial(th) + L, 0.0);
  static const auto query_grad_row = RETNET_ISA_VARIANT(kernel_isa(), aft_query_grad_row);
#pragma omp parallel
  {
    float* mine = scratch + per_slot * omp_get_thread_num();
    double* d_bias = bias_partial(omp_get_thread_num());
    // Key tile 0 meets every query: the first tasks are the largest, dynamic balances.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t j = t / (d.B * blocks), block = (t / d.B) % blocks, b = t % d.B;
      const int64_t j0 = j * tile, c0 = block * kAftChannelBlock;
      const int64_t saved = b * d.T * d.C;
      const GradSequence s{&a.q.at(b, 0, 0),     &a.k.at(b, 0, 0),   &a.v.at(b, 0, 0),
                           &a.d_out.at(b, 0, 0), a.row_max + saved,  a.denominator + saved,
                           a.ratio + saved,      &a.d_k.at(b, 0, 0), &a.d_v.at(b, 0, 0),
                           a.q.stride[1],        a.k.stride[1],      a.v.stride[1],
                           a.d_out.stride[1],    a.d_k.stride[1],    a.d_v.stride[1]};
      backward_key_tile(s, j0, std::min(tile, d.T - j0), c0, std::min(kAftChannelBlock, d.C - c0),
                        d.T, d.C, a.bias, L, mine, d_bias);
    }
    // d_q is elementwise: d_out r sigmoid'(q).
#pragma omp for schedule(static)
    for (int64_t row = 0; row < d.B * d.T; ++row) {
      const int64_t b = row / d.T, n = row % d.T;
      const float* q = &a.q.at(b, n, 0);
      const float* d_out = &a.d_out.at(b, n, 0);
      query_grad_row(q, d_out, a.ratio + row * d.C, &a.d_q.at(b, n, 0), d.C);
    }
  }
  // Sum the per-thread d_bias partials (the implicit barrier above completes them).
  for (int64_t l = 0; l < L; ++l) {
    double sum = 0;
    for (size_t th = 0; th < slots; ++th) sum += bias_partial(th)[l];
    a.d_bias[l] += static_cast<float>(sum);
  }
}

}  // namespace retnet
