// Backward passes of the two training forms of retention; the forward's definition is in
// src/include/retnet/mixers/retention.h.
//
// With values augmented by a constant 1 (A_n = sum_m w_nm (q_n . k_m) [v_m, 1], w_nm = gamma^(n-m))
// and o_n = alpha_n A_n[:Dv], the gradient of A_n is G_n = [alpha_n dO_n, beta_n (dO_n . o_n)]: the
// first part is the scale, the last entry is the row sum's share through the clamp
// max(|r_n| / sqrt(S_n), 1) (beta_n = -1 / r_n where it clamps, else 0). From there it is decayed
// linear attention: dScore = (G Vaug^T) .* w, dQ = dScore K, dK = dScore^T Q, dV = (QK^T .* w)^T G.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "../shared/head_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/mixers/retention.h"
#include "retention_form_kernels.h"

namespace retnet {
namespace {

// One head's rows (see detail::HeadGradRows), its per-token (alpha, beta) (stride ld_stats) and
// its decay.
struct GradHead : detail::HeadGradRows {
  const float* stats;
  int64_t ld_stats;
  double gamma;
  const float* start_state;  // [Dk, Dv+1] the forward started from, or nullptr (empty)
  float* d_start_state;      // [Dk, Dv+1] its gradient, or nullptr
};

void decay_powers(double gamma, int64_t n, float* gp) {
  double lg = std::log(gamma);
  for (int64_t i = 0; i < n; ++i) gp[i] = static_cast<float>(std::exp(static_cast<double>(i) * lg));
}

// G rows [L, Dv+1] and Vaug rows [L, Dv+1] for tokens [t0, t0 + L).
void build_rows(const GradHead& g, int64_t t0, int64_t L, int64_t Dv, float* G, float* vaug) {
  detail::augmented_grad_rows(g, t0, L, Dv, G, vaug, [&](int64_t t) {
    return std::pair{g.stats[t * g.ld_stats], g.stats[t * g.ld_stats + 1]};
  });
}

// Inside one block of L tokens at t0: scores, their gradient, and the block's share of dQ, dK, dV.
// P, dS: [L, L] scratch.
void block_backward(const GradHead& g, int64_t t0, int64_t L, int64_t Dk, int64_t Dv, const float* G,
                    const float* vaug, const float* gp, float* P, float* dS) {
  const int64_t W = Dv + 1;
  const float* q = g.q + t0 * g.ldq;
  const float* k = g.k + t0 * g.ldk;
  sgemm(Trans::No, Trans::Yes, L, L, Dk, 1.f, q, g.ldq, k, g.ldk, 0.f, P, L);
  sgemm(Trans::No, Trans::Yes, L, L, W, 1.f, G, W, vaug, W, 0.f, dS, L);
  static const auto decay_mask = RETNET_ISA_VARIANT(kernel_isa(), retention_decay_mask);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && L >= 256)
  for (int64_t n = 0; n < L; ++n) {
    decay_mask(P, L, n, n + 1, L, gp, nullptr);
    decay_mask(dS, L, n, n + 1, L, gp, nullptr);
  }
  sgemm(Trans::No, Trans::No, L, Dk, L, 1.f, dS, L, k, g.ldk, 1.f, g.d_q + t0 * g.ld_dq, g.ld_dq);
  sgemm(Trans::Yes, Trans::No, L, Dk, L, 1.f, dS, L, q, g.ldq, 1.f, g.d_k + t0 * g.ld_dk, g.ld_dk);
  sgemm(Trans::Yes, Trans::No, L, Dv, L, 1.f, P, L, G, W, 1.f, g.d_v + t0 * g.ld_dv, g.ld_dv);
}

void parallel_backward_head(const GradHead& g, int64_t T, int64_t Dk, int64_t Dv, float* scratch) {
  const int64_t W = Dv + 1;
  float* P = scratch;
  float* dS = P + T * T;
  float* G = dS + T * T;
  float* vaug = G + T * W;
  float* gp = vaug + T * W;
  decay_powers(g.gamma, T, gp);
  build_rows(g, 0, T, Dv, G, vaug);
  block_backward(g, 0, T, Dk, Dv, G, vaug, gp, P, dS);
}

size_t chunkwise_backward_scratch(int64_t C, int64_t Dk, int64_t Dv) {
  const int64_t W = Dv + 1;
  return 2 * C * C + 2 * C * W + 2 * C * Dk + 2 * Dk * W + (C + 1);
}

void chunkwise_backward_head(const GradHead& g, int64_t T, int64_t Dk, int64_t Dv, int64_t C,
                             float* scratch) {
  const int64_t W = Dv + 1;
  float* P = scratch;
  float* dS = P + C * C;
  float* G = dS + C * C;
  float* vaug = G + C * W;
  float* qd = vaug + C * W;  // [C, Dk] decayed queries / keys
  float* kd = qd + C * Dk;   // [C, Dk]
  float* S = kd + C * Dk;    // [Dk, W] the state entering a chunk
  float* R = S + Dk * W;     // [Dk, W] the gradient of the state leaving a chunk
  float* gp = R + Dk * W;    // [C+1]
  decay_powers(g.gamma, C + 1, gp);
  static const auto scale_rows = RETNET_ISA_VARIANT(kernel_isa(), retention_scale_rows);

  // Forward sweep: dQ's share from the state, dQ_c += diag(gamma^(j+1)) G_c S_c^T.
  if (g.start_state)
    std::memcpy(S, g.start_state, static_cast<size_t>(Dk * W) * sizeof(float));
  else
    std::fill(S, S + Dk * W, 0.f);
  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int64_t L = std::min(C, T - t0);
    build_rows(g, t0, L, Dv, G, vaug);
    scale_rows(G, W, G, W, L, W, gp + 1, 1);
    sgemm(Trans::No, Trans::Yes, L, Dk, W, 1.f, G, W, S, W, 1.f, g.d_q + t0 * g.ld_dq, g.ld_dq);
    scale_rows(g.k + t0 * g.ldk, g.ldk, kd, Dk, L, Dk, gp + L - 1, -1);
    sgemm(Trans::Yes, Trans::No, Dk, W, L, 1.f, kd, Dk, vaug, W, gp[L], S, W);
  }

  // Backward sweep over the chunks, last first: the inside of each chunk, then dK, dV from R.
  std::fill(R, R + Dk * W, 0.f);
  const int64_t last = ((T - 1) / C) * C;
  for (int64_t t0 = last; t0 >= 0; t0 -= C) {
    const int64_t L = std::min(C, T - t0);
    build_rows(g, t0, L, Dv, G, vaug);
    block_backward(g, t0, L, Dk, Dv, G, vaug, gp, P, dS);
    const float* q = g.q + t0 * g.ldq;
    const float* k = g.k + t0 * g.ldk;
    // dK_c += diag(gamma^(L-1-i)) Vaug_c R^T ; dV_c += diag(gamma^(L-1-i)) K_c R[:, :Dv].
    scale_rows(vaug, W, vaug, W, L, W, gp + L - 1, -1);
    scale_rows(k, g.ldk, kd, Dk, L, Dk, gp + L - 1, -1);
    sgemm(Trans::No, Trans::Yes, L, Dk, W, 1.f, vaug, W, R, W, 1.f, g.d_k + t0 * g.ld_dk, g.ld_dk);
    sgemm(Trans::No, Trans::No, L, Dv, Dk, 1.f, kd, Dk, R, W, 1.f, g.d_v + t0 * g.ld_dv, g.ld_dv);
    // R entering this chunk: gamma^L R + (diag(gamma^(j+1)) Q_c)^T G_c.
    scale_rows(q, g.ldq, qd, Dk, L, Dk, gp + 1, 1);
    sgemm(Trans::Yes, Trans::No, Dk, W, L, 1.f, qd, Dk, G, W, gp[L], R, W);
  }
  // R is now the gradient of the state entering the first chunk.
  if (g.d_start_state) std::memcpy(g.d_start_state, R, static_cast<size_t>(Dk * W) * sizeof(float));
}

GradHead grad_head(const RetentionGradArgs& a, int64_t T, int64_t H, int64_t b, int64_t h,
                   int64_t state_floats) {
  const int64_t at = b * a.state_stride + h * state_floats;
  return {detail::head_grad_rows(a.q, a.k, a.v, a.out, a.d_out, a.d_q, a.d_k, a.d_v, b, h),
          a.row_stats + (b * T * H + h) * 2, H * 2, a.gammas[h],
          a.start_state ? a.start_state + at : nullptr,
          a.d_start_state ? a.d_start_state + at : nullptr};
}

}  // namespace

size_t retention_backward_workspace_floats(Form form, int64_t T, int64_t Dk, int64_t Dv,
                                           int64_t chunk) {
  size_t per_head = form == Form::Parallel
                        ? 2 * T * T + 2 * T * (Dv + 1) + T
                        : chunkwise_backward_scratch(std::min(chunk, T), Dk, Dv);
  return detail::head_loop_footprint_bound(per_head);
}

void retention_backward(Form form, const RetentionGradArgs& a, Arena& arena) {
  RETNET_CHECK(form == Form::Parallel || form == Form::Chunkwise,
               "retention backward exists for the parallel and chunkwise forms, not {}",
               form_name(form));
  RETNET_CHECK(a.row_stats != nullptr && a.gammas != nullptr,
               "retention backward needs the forward's row stats and the decays");
  const int64_t B = a.q.shape[0], T = a.q.shape[1], H = a.q.shape[2];
  const int64_t Dk = a.q.shape[3], Dv = a.v.shape[3];
  for (const TensorView* t : {&a.q, &a.k, &a.d_q, &a.d_k})
    RETNET_CHECK(detail::is_head_view(*t, B, T, H, Dk),
                 "retention backward: q, k and their gradients must be [B, T, H, Dk]");
  for (const TensorView* t : {&a.v, &a.out, &a.d_out, &a.d_v})
    RETNET_CHECK(detail::is_head_view(*t, B, T, H, Dv),
                 "retention backward: v, out and their gradients must be [B, T, H, Dv]");
  RETNET_CHECK(a.chunk >= 1, "chunk size must be at least 1, got {}", a.chunk);
  RETNET_CHECK(form == Form::Chunkwise || (!a.start_state && !a.d_start_state),
               "retention backward: only the chunkwise form starts from a given state");
  const int64_t C = std::min(a.chunk, T);
  const size_t per_head = form == Form::Parallel
                              ? 2 * T * T + 2 * T * (Dv + 1) + T
                              : chunkwise_backward_scratch(C, Dk, Dv);
  detail::for_each_head(B, H, arena, per_head, [&](int64_t b, int64_t h, float* s) {
    const GradHead g = grad_head(a, T, H, b, h, retention_state_floats_per_head(Dk, Dv));
    if (form == Form::Parallel)
      parallel_backward_head(g, T, Dk, Dv, s);
    else
      chunkwise_backward_head(g, T, Dk, Dv, C, s);
  });
}

}  // namespace retnet
