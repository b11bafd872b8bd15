// Backward pass of softmax attention (FlashAttention-2's): no T x T buffer, each tile of
// probabilities recomputed from q, k and the forward's logsumexp.
//
// With P = softmax(scale Q K^T) (causal) and D_n = dO_n . o_n = sum_m P_nm (dO_n . v_m):
//   dV = P^T dO,  dP = dO V^T,  dS = P .* (dP - D),  dQ = scale dS K,  dK = scale dS^T Q.
// The loop runs key tiles outside and query tiles inside, so a key tile's dK and dV rows are owned
// by one thread; dQ rows are shared between key tiles and handled per schedule (see below).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../shared/head_loop.h"
#include "attention_kernels.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/mixers/attention.h"

namespace retnet {
namespace {

using namespace attention_detail;

// One head's operands (rows of T tokens, strides ld*); d_q may be a per-thread partial sum.
// One head's rows, and its queries' log-sum-exp (stride ld_lse).
struct GradHead : detail::HeadGradRows {
  const float* lse;
  int64_t ld_lse;
  int64_t window;  // 0: every earlier key
};

size_t tile_scratch(int64_t tile) { return 2 * tile * tile; }

// D [T]: D_n = dO_n . o_n, the row term of the softmax Jacobian, once per head.
void row_terms(const GradHead& g, int64_t T, int64_t Dv, float* D) {
  static const auto row_dots = RETNET_ISA_VARIANT(kernel_isa(), attention_row_dots);
  row_dots(g.d_out, g.ld_do, g.out, g.ldo, T, Dv, D);
}

// P [Lq, Lk] = exp(scale Q K^T - lse) for queries i0.., keys j0.., 0 above the diagonal.
void recompute_probabilities(const GradHead& g, int64_t i0, int64_t Lq, int64_t j0, int64_t Lk,
                             int64_t Dk, float scale, float* P) {
  sgemm(Trans::No, Trans::Yes, Lq, Lk, Dk, scale, g.q + i0 * g.ldq, g.ldq, g.k + j0 * g.ldk, g.ldk,
        0.f, P, Lk);
  for (int64_t i = 0; i < Lq; ++i) {
    float* p = P + i * Lk;
    const int64_t visible = std::clamp<int64_t>(i0 + i - j0 + 1, 0, Lk);
    const int64_t before =
        g.window > 0 ? std::clamp<int64_t>(i0 + i - g.window + 1 - j0, 0, visible) : 0;
    const float lse = g.lse[(i0 + i) * g.ld_lse];
    exp_shifted_sum(p + before, visible - before, lse);
    std::fill(p, p + before, 0.f);
    std::fill(p + visible, p + Lk, 0.f);
  }
}

// Key rows [j0, j0 + Lk) against every query tile that sees them (queries j0 .. T - 1).
// D [T] from row_terms; scratch: P [tile, tile], dP [tile, tile].
void backward_key_tile(const GradHead& g, const float* D, int64_t j0, int64_t Lk, int64_t T,
                       int64_t tile, int64_t Dk, int64_t Dv, float* scratch) {
  float* P = scratch;
  float* dP = P + tile * tile;
  const float scale = 1.f / std::sqrt(static_cast<float>(Dk));
  const float* k = g.k + j0 * g.ldk;
  const float* v = g.v + j0 * g.ldv;
  // The last query that sees one of these keys (a window ends each key's reach).
  const int64_t end = g.window > 0 ? std::min(T, j0 + Lk + g.window - 1) : T;
  for (int64_t i0 = j0; i0 < end; i0 += tile) {
    const int64_t Lq = std::min(tile, T - i0);
    const float* q = g.q + i0 * g.ldq;
    const float* d_out = g.d_out + i0 * g.ld_do;
    recompute_probabilities(g, i0, Lq, j0, Lk, Dk, scale, P);
    // dV_j += P^T dO_i ; dP = scale dO_i V_j^T. The scale is folded in here rather than into
    // the dQ and dK products, which also keeps this product on OpenBLAS's small-matrix kernel:
    // sgemm sends (No, Yes) products with alpha 1 and <= 64 rows to the decode-oriented skinny
    // kernel, which is slower on square tiles (docs/design-notes.md#attention-backward-tiles).
    sgemm(Trans::Yes, Trans::No, Lk, Dv, Lq, 1.f, P, Lk, d_out, g.ld_do, 1.f, g.d_v + j0 * g.ld_dv,
          g.ld_dv);
    sgemm(Trans::No, Trans::Yes, Lq, Lk, Dv, scale, d_out, g.ld_do, v, g.ldv, 0.f, dP, Lk);
    // scale dS = P .* (scale dP - scale D): masked entries have P = 0.
    for (int64_t i = 0; i < Lq; ++i) {
      float* ds = dP + i * Lk;
      const float* p = P + i * Lk;
      const float Di = scale * D[i0 + i];
#pragma omp simd
      for (int64_t j = 0; j < Lk; ++j) ds[j] = p[j] * (ds[j] - Di);
    }
    // dQ_i += (scale dS) K_j ; dK_j += (scale dS)^T Q_i
    sgemm(Trans::No, Trans::No, Lq, Dk, Lk, 1.f, dP, Lk, k, g.ldk, 1.f, g.d_q + i0 * g.ld_dq,
          g.ld_dq);
    sgemm(Trans::Yes, Trans::No, Lk, Dk, Lq, 1.f, dP, Lk, q, g.ldq, 1.f, g.d_k + j0 * g.ld_dk,
          g.ld_dk);
  }
}

GradHead grad_head(const AttentionGradArgs& a, const Dims& d, int64_t b, int64_t h) {
  return {detail::head_grad_rows(a.q, a.k, a.v, a.out, a.d_out, a.d_q, a.d_k, a.d_v, b, h),
          a.logsumexp + b * d.T * d.H + h, d.H, a.window};
}

// Heads run in parallel when there are enough of them; otherwise one head at a time with its key
// tiles split across threads, each thread summing dQ into its own [T, Dk] buffer (dQ rows receive
// from every key tile, and a race-free sum needs either this or a second pass over the tiles).
bool heads_in_parallel(int64_t B, int64_t H) {
  return B * H >= static_cast<int64_t>(thread_slots()) || thread_slots() == 1;
}

}  // namespace

size_t attention_backward_workspace_floats(int64_t B, int64_t T, int64_t H, int64_t Dk,
                                           int64_t /*Dv*/, int64_t tile) {
  const int64_t t = std::clamp<int64_t>(tile, 1, std::max<int64_t>(T, 1));
  // Per thread: the tile scratch and D [T] (heads in parallel) or a partial dQ [T, Dk] (plus one
  // shared D [T]).
  if (heads_in_parallel(B, H)) return Arena::footprint((tile_scratch(t) + T) * thread_slots());
  return Arena::footprint((tile_scratch(t) + T * Dk) * thread_slots() + T);
}

void attention_backward(const AttentionGradArgs& a, Arena& arena) {
  const Dims d = check_dims(a.q, a.k, a.v, a.out, "attention_backward");
  check_dims(a.d_q, a.d_k, a.d_v, a.d_out, "attention_backward (gradients)");
  RETNET_CHECK(a.d_q.shape == a.q.shape && a.d_v.shape == a.v.shape,
               "attention_backward: gradients [{}, {}, {}, {}] / [.., {}] do not match q [{}, {}, "
               "{}, {}] / v [.., {}]",
               a.d_q.shape[0], a.d_q.shape[1], a.d_q.shape[2], a.d_q.shape[3], a.d_v.shape[3], d.B,
               d.T, d.H, d.Dk, d.Dv);
  RETNET_CHECK(a.logsumexp != nullptr, "attention_backward needs the forward's logsumexp");
  RETNET_CHECK(a.tile >= 1, "attention_backward: tile must be at least 1, got {}", a.tile);
  if (d.B == 0 || d.T == 0 || d.H == 0) return;
  const int64_t tile = std::min(a.tile, d.T);
  const int64_t key_tiles = (d.T + tile - 1) / tile;
  const size_t slots = thread_slots();
  if (heads_in_parallel(d.B, d.H)) {
    const size_t per_slot = tile_scratch(tile) + d.T;
    float* scratch = arena.alloc(per_slot * slots);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < d.B * d.H; ++t) {
      const GradHead g = grad_head(a, d, t / d.H, t % d.H);
      float* D = scratch + per_slot * omp_get_thread_num();  // [T]
      row_terms(g, d.T, d.Dv, D);
      for (int64_t j = 0; j < key_tiles; ++j)
        backward_key_tile(g, D, j * tile, std::min(tile, d.T - j * tile), d.T, tile, d.Dk, d.Dv,
                          D + d.T);
    }
    return;
  }
  const size_t per_slot = tile_scratch(tile) + d.T * d.Dk;
  float* scratch = arena.alloc(per_slot * slots + d.T);
  float* D = scratch + per_slot * slots;  // [T], shared by the threads of a head
  for (int64_t t = 0; t < d.B * d.H; ++t) {
    const GradHead head = grad_head(a, d, t / d.H, t % d.H);
    row_terms(head, d.T, d.Dv, D);
#pragma omp parallel
    {
      float* dq_part = scratch + per_slot * omp_get_thread_num();  // [T, Dk]
      std::fill(dq_part, dq_part + d.T * d.Dk, 0.f);
      GradHead g = head;
      g.d_q = dq_part, g.ld_dq = d.Dk;
      // Key tile 0 meets every query tile: the first tiles are the largest, dynamic balances.
#pragma omp for schedule(dynamic, 1)
      for (int64_t j = 0; j < key_tiles; ++j)
        backward_key_tile(g, D, j * tile, std::min(tile, d.T - j * tile), d.T, tile, d.Dk, d.Dv,
                          dq_part + d.T * d.Dk);
      // Sum the partial dQ into d_q, rows split across threads (the barrier above completes them).
      const int threads = omp_get_num_threads();
#pragma omp for schedule(static)
      for (int64_t n = 0; n < d.T; ++n) {
        float* dst = head.d_q + n * head.ld_dq;
        for (int th = 0; th < threads; ++th) {
          const float* src = scratch + per_slot * th + n * d.Dk;
#pragma omp simd
          for (int64_t c = 0; c < d.Dk; ++c) dst[c] += src[c];
        }
      }
    }
  }
}

}  // namespace retnet
