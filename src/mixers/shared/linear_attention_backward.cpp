// Backward passes of the two training forms of causal kernelised attention; the forward's
// definition is in src/include/retnet/mixers/linear_attention.h.
//
// With A_n = sum_{m<=n} (phi_q_n . phi_k_m) [v_m, 1] and o_n = A_n[:Dv] / A_n[Dv], the gradient of
// A_n is G_n = [dO_n, -(dO_n . o_n)] / A_n[Dv] (0 where A_n[Dv] = 0). From there it is retention's
// backward without decay: dScore = mask(G Vaug^T), dPhiQ = dScore PhiK, dPhiK = dScore^T PhiQ,
// dV = mask(PhiQ PhiK^T)^T G[:, :Dv].
#include <algorithm>
#include <cstring>
#include <utility>

#include "head_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/mixers/linear_attention.h"

namespace retnet {
namespace {

// One head's rows (q and k: the features phi(q), phi(k), and d_q, d_k their gradients), and its
// tokens' inverse denominators (stride ld_inv).
struct GradHead : detail::HeadGradRows {
  const float* inv;
  int64_t ld_inv;
  const float* start_state;  // [F, Dv + 1] or nullptr (empty)
  float* d_start_state;      // [F, Dv + 1] or nullptr
};

struct Dims {
  int64_t B, T, H, F, Dv;
};

// G rows [L, Dv + 1] and Vaug rows [L, Dv + 1] for tokens [t0, t0 + L).
void build_rows(const GradHead& g, int64_t t0, int64_t L, int64_t Dv, float* G, float* vaug) {
  detail::augmented_grad_rows(g, t0, L, Dv, G, vaug, [&](int64_t t) {
    const float inv = g.inv[t * g.ld_inv];
    return std::pair{inv, -inv};
  });
}

// Inside one block of L tokens at t0: scores, their gradient, and the block's share of the
// gradients. P, dS: [L, L] scratch.
void block_backward(const GradHead& g, int64_t t0, int64_t L, int64_t F, int64_t Dv,
                    const float* G, const float* vaug, float* P, float* dS) {
  const int64_t W = Dv + 1;
  const float* pq = g.q + t0 * g.ldq;
  const float* pk = g.k + t0 * g.ldk;
  sgemm(Trans::No, Trans::Yes, L, L, F, 1.f, pq, g.ldq, pk, g.ldk, 0.f, P, L);
  sgemm(Trans::No, Trans::Yes, L, L, W, 1.f, G, W, vaug, W, 0.f, dS, L);
  for (int64_t n = 0; n < L; ++n) {  // causal mask: keys after the query do not count
    std::fill(P + n * L + n + 1, P + (n + 1) * L, 0.f);
    std::fill(dS + n * L + n + 1, dS + (n + 1) * L, 0.f);
  }
  sgemm(Trans::No, Trans::No, L, F, L, 1.f, dS, L, pk, g.ldk, 1.f, g.d_q + t0 * g.ld_dq, g.ld_dq);
  sgemm(Trans::Yes, Trans::No, L, F, L, 1.f, dS, L, pq, g.ldq, 1.f, g.d_k + t0 * g.ld_dk, g.ld_dk);
  sgemm(Trans::Yes, Trans::No, L, Dv, L, 1.f, P, L, G, W, 1.f, g.d_v + t0 * g.ld_dv, g.ld_dv);
}

size_t parallel_backward_scratch(int64_t T, int64_t Dv) { return 2 * T * T + 2 * T * (Dv + 1); }

void parallel_backward_head(const GradHead& g, const Dims& d, float* scratch) {
  const int64_t T = d.T, W = d.Dv + 1;
  float* P = scratch;       // [T, T]
  float* dS = P + T * T;    // [T, T]
  float* G = dS + T * T;    // [T, Dv + 1]
  float* vaug = G + T * W;  // [T, Dv + 1]
  build_rows(g, 0, T, d.Dv, G, vaug);
  block_backward(g, 0, T, d.F, d.Dv, G, vaug, P, dS);
}

size_t chunkwise_backward_scratch(int64_t C, int64_t F, int64_t Dv) {
  return 2 * C * C + 2 * C * (Dv + 1) + 2 * F * (Dv + 1);
}

void chunkwise_backward_head(const GradHead& g, const Dims& d, int64_t C, float* scratch) {
  const int64_t T = d.T, F = d.F, Dv = d.Dv, W = Dv + 1;
  float* P = scratch;       // [C, C]
  float* dS = P + C * C;    // [C, C]
  float* G = dS + C * C;    // [C, Dv + 1]
  float* vaug = G + C * W;  // [C, Dv + 1]
  float* S = vaug + C * W;  // [F, Dv + 1] the state entering a chunk
  float* R = S + F * W;     // [F, Dv + 1] the gradient of the state leaving a chunk

  // Forward sweep: dPhiQ_c += G_c S_c^T, then S += PhiK_c^T Vaug_c.
  if (g.start_state)
    std::memcpy(S, g.start_state, static_cast<size_t>(F * W) * sizeof(float));
  else
    std::fill(S, S + F * W, 0.f);
  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int64_t L = std::min(C, T - t0);
    build_rows(g, t0, L, Dv, G, vaug);
    sgemm(Trans::No, Trans::Yes, L, F, W, 1.f, G, W, S, W, 1.f, g.d_q + t0 * g.ld_dq, g.ld_dq);
    sgemm(Trans::Yes, Trans::No, F, W, L, 1.f, g.k + t0 * g.ldk, g.ldk, vaug, W, 1.f, S, W);
  }

  // Backward sweep, last chunk first: the inside of each chunk, then dPhiK, dV from R.
  std::fill(R, R + F * W, 0.f);
  const int64_t last = ((T - 1) / C) * C;
  for (int64_t t0 = last; t0 >= 0; t0 -= C) {
    const int64_t L = std::min(C, T - t0);
    build_rows(g, t0, L, Dv, G, vaug);
    block_backward(g, t0, L, F, Dv, G, vaug, P, dS);
    // dPhiK_c += Vaug_c R^T ; dV_c += PhiK_c R[:, :Dv].
    sgemm(Trans::No, Trans::Yes, L, F, W, 1.f, vaug, W, R, W, 1.f, g.d_k + t0 * g.ld_dk, g.ld_dk);
    sgemm(Trans::No, Trans::No, L, Dv, F, 1.f, g.k + t0 * g.ldk, g.ldk, R, W, 1.f,
          g.d_v + t0 * g.ld_dv, g.ld_dv);
    // R entering this chunk: R + PhiQ_c^T G_c.
    sgemm(Trans::Yes, Trans::No, F, W, L, 1.f, g.q + t0 * g.ldq, g.ldq, G, W, 1.f, R, W);
  }
  // R is now the gradient of the state entering the first chunk.
  if (g.d_start_state) std::memcpy(g.d_start_state, R, static_cast<size_t>(F * W) * sizeof(float));
}

size_t backward_scratch(Form form, int64_t T, int64_t F, int64_t Dv,
                        int64_t chunk) {
  return form == Form::Parallel
             ? parallel_backward_scratch(T, Dv)
             : chunkwise_backward_scratch(std::min(std::max<int64_t>(chunk, 1), T), F, Dv);
}

Dims check_grad_args(Form form, const CausalLinearGradArgs& a) {
  RETNET_CHECK(form == Form::Parallel || form == Form::Chunkwise,
               "linear attention backward exists for the parallel and chunkwise forms, not {}",
               form_name(form));
  RETNET_CHECK(a.inv_denominators != nullptr,
               "linear attention backward needs the forward's inverse denominators");
  RETNET_CHECK(a.chunk >= 1, "linear attention: chunk size must be at least 1, got {}", a.chunk);
  RETNET_CHECK(form == Form::Chunkwise || (!a.start_state && !a.d_start_state),
               "linear attention backward: only the chunkwise form starts from a given state");
  const Dims d{a.phi_q.shape[0], a.phi_q.shape[1], a.phi_q.shape[2], a.phi_q.shape[3],
               a.v.shape[3]};
  auto check = [&](const TensorView& t, int64_t last, const char* name) {
    RETNET_CHECK(detail::is_head_view(t, d.B, d.T, d.H, last),
                 "linear attention backward: {} is [{}, {}, {}, {}], expected [{}, {}, {}, {}] "
                 "with unit stride in the last dim",
                 name, t.shape[0], t.shape[1], t.shape[2], t.shape[3], d.B, d.T, d.H, last);
  };
  check(a.phi_k, d.F, "phi_k");
  check(a.d_phi_q, d.F, "d_phi_q");
  check(a.d_phi_k, d.F, "d_phi_k");
  check(a.v, d.Dv, "v");
  check(a.out, d.Dv, "out");
  check(a.d_out, d.Dv, "d_out");
  check(a.d_v, d.Dv, "d_v");
  return d;
}

GradHead grad_head(const CausalLinearGradArgs& a, const Dims& d, int64_t b, int64_t h) {
  const int64_t at = b * a.state_stride + h * linear_attention_state_floats_per_head(d.F, d.Dv);
  return {detail::head_grad_rows(a.phi_q, a.phi_k, a.v, a.out, a.d_out, a.d_phi_q, a.d_phi_k,
                                 a.d_v, b, h),
          a.inv_denominators + b * d.T * d.H + h, d.H,
          a.start_state ? a.start_state + at : nullptr,
          a.d_start_state ? a.d_start_state + at : nullptr};
}

// The backward of a slice's summary sum_m phi(k_m)^T [v_m, 1] per head: with dU its gradient,
// dPhiK += V dU[:, :Dv]^T + dU[:, Dv]^T and dV += PhiK dU[:, :Dv].
void slice_summary_backward(const CausalLinearGradArgs& a, const Dims& d, const float* d_state,
                            Arena& arena) {
  const int64_t W = d.Dv + 1;
  detail::for_each_head(d.B, d.H, arena, 0, [&](int64_t b, int64_t h, float*) {
    const GradHead g = grad_head(a, d, b, h);
    const float* dU = d_state + b * a.state_stride +
                      h * linear_attention_state_floats_per_head(d.F, d.Dv);
    sgemm(Trans::No, Trans::Yes, d.T, d.F, d.Dv, 1.f, g.v, g.ldv, dU, W, 1.f, g.d_k, g.ld_dk);
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t f = 0; f < d.F; ++f) g.d_k[t * g.ld_dk + f] += dU[f * W + d.Dv];
    sgemm(Trans::No, Trans::No, d.T, d.Dv, d.F, 1.f, g.k, g.ldk, dU, W, 1.f, g.d_v, g.ld_dv);
  });
}

}  // namespace

size_t causal_linear_attention_backward_workspace_floats(Form form, int64_t B,
                                                         int64_t T, int64_t H, int64_t F,
                                                         int64_t Dv, int64_t chunk) {
  return detail::head_loop_footprint(B, H, backward_scratch(form, T, F, Dv, chunk));
}

void causal_linear_attention_backward(Form form, const CausalLinearGradArgs& a,
                                      Arena& arena) {
  const Dims d = check_grad_args(form, a);
  if (d.B * d.T * d.H == 0) return;
  const int64_t C = std::min(a.chunk, d.T);
  detail::for_each_head(d.B, d.H, arena, backward_scratch(form, d.T, d.F, d.Dv, C),
                        [&](int64_t b, int64_t h, float* s) {
                          const GradHead g = grad_head(a, d, b, h);
                          if (form == Form::Parallel)
                            parallel_backward_head(g, d, s);
                          else
                            chunkwise_backward_head(g, d, C, s);
                        });
}

size_t linear_attention_backward_workspace_floats(Form form,
                                                  const FeatureMap& features, int64_t B,
                                                  int64_t T, int64_t H, int64_t Dk, int64_t Dv,
                                                  int64_t chunk) {
  const int64_t F = features.features(Dk);
  return 2 * Arena::footprint(B * T * H * F) +
         std::max(causal_linear_attention_backward_workspace_floats(form, B, T, H, F, Dv, chunk),
                  feature_map_backward_workspace_floats(features, B, T, H));
}

void linear_attention_backward(Form form, const LinearAttentionGradArgs& a,
                               Arena& arena) {
  RETNET_CHECK(a.phi_q != nullptr && a.phi_k != nullptr,
               "linear attention backward needs the features saved by the forward");
  RETNET_CHECK(a.q.ndim == 4 && a.k.ndim == 4 && a.q.shape == a.k.shape,
               "linear attention backward: q and k must have the same [B, T, H, Dk] shape");
  const int64_t B = a.q.shape[0], T = a.q.shape[1], H = a.q.shape[2], Dk = a.q.shape[3];
  const int64_t F = a.features.features(Dk);
  if (B * T * H == 0) return;
  // The saved features are read-only; views over them are typed float* for TensorView only.
  auto view = [&](const float* p) {
    return TensorView::contiguous(const_cast<float*>(p), {B, T, H, F});
  };
  float* d_pq = arena.alloc(B * T * H * F);
  float* d_pk = arena.alloc(B * T * H * F);
  std::fill(d_pq, d_pq + B * T * H * F, 0.f);
  std::fill(d_pk, d_pk + B * T * H * F, 0.f);
  CausalLinearGradArgs k;
  k.phi_q = view(a.phi_q);
  k.phi_k = view(a.phi_k);
  k.v = a.v;
  k.out = a.out;
  k.d_out = a.d_out;
  k.d_phi_q = view(d_pq);
  k.d_phi_k = view(d_pk);
  k.d_v = a.d_v;
  k.inv_denominators = a.inv_denominators;
  k.chunk = a.chunk;
  k.start_state = a.start_state;
  k.d_start_state = a.d_start_state;
  k.state_stride = a.state_stride;
  const size_t mark = arena.used();
  causal_linear_attention_backward(form, k, arena);
  arena.rewind(mark);
  if (a.leave_slice) {
    RETNET_CHECK(a.d_start_state != nullptr,
                 "linear attention backward: leaving a slice needs d_start_state");
    a.leave_slice();
    slice_summary_backward(k, check_grad_args(form, k), a.d_start_state, arena);
    arena.rewind(mark);
  }
  feature_map_backward(a.features, a.q, k.phi_q, k.d_phi_q, a.d_q, arena);
  arena.rewind(mark);
  feature_map_backward(a.features, a.k, k.phi_k, k.d_phi_k, a.d_k, arena);
}

}  // namespace retnet
