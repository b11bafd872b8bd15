// Causal kernelised attention in three forms; see src/include/retnet/mixers/linear_attention.h
// for the definition they share.
#include "retnet/mixers/linear_attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "head_loop.h"
#include "linear_attention_step.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"

namespace retnet {
namespace {

struct Dims {
  int64_t B, T, H, F, Dv;
};

Dims dims_of(const CausalLinearArgs& a) {
  Dims d{a.phi_q.shape[0], a.phi_q.shape[1], a.phi_q.shape[2], a.phi_q.shape[3], a.v.shape[3]};
  auto check = [&](const TensorView& t, int64_t last, const char* name) {
    RETNET_CHECK(detail::is_head_view(t, d.B, d.T, d.H, last),
                 "linear attention: {} is [{}, {}, {}, {}] (last stride {}), expected [{}, {}, {}, "
                 "{}] with unit stride in the last dim",
                 name, t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.stride[3], d.B, d.T, d.H,
                 last);
  };
  check(a.phi_q, d.F, "phi_q");
  check(a.phi_k, d.F, "phi_k");
  check(a.v, d.Dv, "v");
  check(a.out, d.Dv, "out");
  return d;
}

// Per-(sequence, head) pointers into the strided views: q, k rows are phi(q), phi(k) ([T, F]),
// v, out rows [T, Dv].
struct HeadBlock : detail::HeadRows {
  float* state;    // [F, Dv + 1] or nullptr
  float* inv_den;  // per token, stride H; or nullptr
  int64_t ld_inv;
};

HeadBlock head_block(const CausalLinearArgs& a, const Dims& d, int64_t b, int64_t h) {
  float* state = a.state ? a.state + sequence_row(a.rows, b) * a.state_stride +
                               h * linear_attention_state_floats_per_head(d.F, d.Dv)
                         : nullptr;
  return {detail::head_rows(a.phi_q, a.phi_k, a.v, a.out, b, h), state,
          a.inv_denominators ? a.inv_denominators + b * d.T * d.H + h : nullptr, d.H};
}

// out = aug[:Dv] / den, or 0 where den = 0 (every feature product zero; see the header).
// `inv` (if given) receives the 1 / den applied, for the backward pass.
inline void normalise_row(const float* aug, float den, float* out, int64_t Dv, float* inv) {
  const float scale = den > 0.f ? 1.f / den : 0.f;
  if (inv) *inv = scale;
#pragma omp simd
  for (int64_t j = 0; j < Dv; ++j) out[j] = aug[j] * scale;
}

// ---- parallel form: the masked [T, T] feature scores of each head ------------------------------
size_t parallel_scratch(int64_t T) { return T * T + T; }

void parallel_head(const HeadBlock& hb, const Dims& d, float* scratch) {
  const int64_t T = d.T;
  float* P = scratch;     // [T, T]
  float* rows = P + T * T;  // [T] row sums: the denominators
  sgemm(Trans::No, Trans::Yes, T, T, d.F, 1.f, hb.q, hb.ldq, hb.k, hb.ldk, 0.f, P, T);
  for (int64_t n = 0; n < T; ++n) {
    float* p = P + n * T;
    float s = 0.f;
    for (int64_t m = 0; m <= n; ++m) s += p[m];
    std::fill(p + n + 1, p + T, 0.f);
    rows[n] = s;
  }
  sgemm(Trans::No, Trans::No, T, d.Dv, T, 1.f, P, T, hb.v, hb.ldv, 0.f, hb.out, hb.ldo);
  for (int64_t n = 0; n < T; ++n)
    normalise_row(hb.out + n * hb.ldo, rows[n], hb.out + n * hb.ldo, d.Dv,
                  hb.inv_den ? hb.inv_den + n * hb.ld_inv : nullptr);
}

// ---- recurrent form: S += phi(k)^T [v, 1], A = phi(q) S, one token at a time --------------------
size_t recurrent_scratch(int64_t Dv) { return 2 * (Dv + 1); }

void recurrent_head(const HeadBlock& hb, const Dims& d, float* scratch) {
  const int64_t W = d.Dv + 1;
  float* vaug = scratch;  // [Dv + 1]
  float* aug = vaug + W;  // [Dv + 1]
  float* S = hb.state;    // [F, Dv + 1]
  static const auto token_step = RETNET_ISA_VARIANT(kernel_isa(), linear_attention_token_step);
  for (int64_t t = 0; t < d.T; ++t) {
    std::memcpy(vaug, hb.v + t * hb.ldv, d.Dv * sizeof(float));
    vaug[d.Dv] = 1.f;
    // One pass over the state: add the new outer product, read it with the query.
    token_step(S, W, d.F, hb.q + t * hb.ldq, hb.k + t * hb.ldk, vaug, aug);
    normalise_row(aug, aug[d.Dv], hb.out + t * hb.ldo, d.Dv,
                  hb.inv_den ? hb.inv_den + t * hb.ld_inv : nullptr);
  }
}

// ---- chunkwise form: the parallel form inside a chunk, the state across chunks -----------------
size_t chunkwise_scratch(int64_t C, int64_t Dv) { return C * C + 2 * C * (Dv + 1); }

void chunkwise_head(const HeadBlock& hb, const Dims& d, int64_t C, float* scratch) {
  const int64_t F = d.F, Dv = d.Dv, W = Dv + 1;
  float* P = scratch;         // [C, C]
  float* vaug = P + C * C;    // [C, Dv + 1]
  float* aug = vaug + C * W;  // [C, Dv + 1]
  float* S = hb.state;        // [F, Dv + 1]
  for (int64_t t0 = 0; t0 < d.T; t0 += C) {
    const int64_t L = std::min(C, d.T - t0);  // the last chunk may be short: no padding
    const float* pq = hb.q + t0 * hb.ldq;
    const float* pk = hb.k + t0 * hb.ldk;
    for (int64_t i = 0; i < L; ++i) {
      std::memcpy(vaug + i * W, hb.v + (t0 + i) * hb.ldv, Dv * sizeof(float));
      vaug[i * W + Dv] = 1.f;
    }
    // Inside the chunk: masked scores times [v, 1].
    sgemm(Trans::No, Trans::Yes, L, L, F, 1.f, pq, hb.ldq, pk, hb.ldk, 0.f, P, L);
    for (int64_t j = 0; j < L; ++j) std::fill(P + j * L + j + 1, P + (j + 1) * L, 0.f);
    sgemm(Trans::No, Trans::No, L, W, L, 1.f, P, L, vaug, W, 0.f, aug, W);
    // From earlier chunks: phi(Q_c) S. Then the state after the chunk: S += phi(K_c)^T [V_c, 1].
    sgemm(Trans::No, Trans::No, L, W, F, 1.f, pq, hb.ldq, S, W, 1.f, aug, W);
    sgemm(Trans::Yes, Trans::No, F, W, L, 1.f, pk, hb.ldk, vaug, W, 1.f, S, W);
    for (int64_t j = 0; j < L; ++j)
      normalise_row(aug + j * W, aug[j * W + Dv], hb.out + (t0 + j) * hb.ldo, Dv,
                    hb.inv_den ? hb.inv_den + (t0 + j) * hb.ld_inv : nullptr);
  }
}

size_t kernel_scratch(Form form, int64_t T, int64_t Dv, int64_t chunk) {
  switch (form) {
    case Form::Parallel: return parallel_scratch(T);
    case Form::Recurrent: return recurrent_scratch(Dv);
    case Form::Chunkwise: return chunkwise_scratch(std::min(chunk, T), Dv);
    case Form::Scan: return 0;  // no scan form (the forward refuses it)
  }
  return 0;
}

// A contiguous [B, T, H, F] view over `data`.
TensorView features_view(float* data, int64_t B, int64_t T, int64_t H, int64_t F) {
  return TensorView::contiguous(data, {B, T, H, F});
}

// What the tokens add to an empty state, into k.state: per head sum_m phi(k_m)^T [v_m, 1].
void slice_summary(const CausalLinearArgs& k, Arena& arena) {
  const int64_t B = k.phi_k.shape[0], T = k.phi_k.shape[1], H = k.phi_k.shape[2];
  const int64_t F = k.phi_k.shape[3], Dv = k.v.shape[3], W = Dv + 1;
  detail::for_each_head(B, H, arena, 0, [&](int64_t b, int64_t h, float*) {
    float* S = k.state + b * k.state_stride + h * linear_attention_state_floats_per_head(F, Dv);
    const float* pk = &k.phi_k.at(b, 0, h, 0);
    const int64_t ldk = k.phi_k.stride[1];
    sgemm(Trans::Yes, Trans::No, F, Dv, T, 1.f, pk, ldk, &k.v.at(b, 0, h, 0), k.v.stride[1], 0.f,
          S, W);
    for (int64_t f = 0; f < F; ++f) S[f * W + Dv] = 0.f;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) S[f * W + Dv] += pk[t * ldk + f];
  });
}

}  // namespace

size_t causal_linear_attention_workspace_floats(Form form, int64_t B, int64_t T,
                                                int64_t H, int64_t /*F*/, int64_t Dv,
                                                int64_t chunk) {
  return detail::head_loop_footprint(B, H, kernel_scratch(form, T, Dv, std::max<int64_t>(chunk, 1)));
}

void causal_linear_attention_forward(Form form, const CausalLinearArgs& a,
                                     Arena& arena) {
  const Dims d = dims_of(a);
  if (d.T == 0 || d.B == 0 || d.H == 0) return;
  RETNET_CHECK(form != Form::Scan, "linear attention has no scan form");
  RETNET_CHECK(form == Form::Parallel || a.state != nullptr,
               "linear attention: the {} form needs a state buffer",
               form_name(form));
  RETNET_CHECK(a.chunk >= 1, "linear attention: chunk size must be at least 1, got {}", a.chunk);
  const int64_t per_sequence = d.H * linear_attention_state_floats_per_head(d.F, d.Dv);
  RETNET_CHECK(a.state == nullptr || d.B == 1 || a.state_stride >= per_sequence,
               "linear attention: state stride {} is below the {} floats of one sequence's state",
               a.state_stride, per_sequence);
  const int64_t C = std::min(a.chunk, d.T);
  detail::for_each_head(d.B, d.H, arena, kernel_scratch(form, d.T, d.Dv, C),
                        [&](int64_t b, int64_t h, float* s) {
                          const HeadBlock hb = head_block(a, d, b, h);
                          switch (form) {
                            case Form::Parallel: parallel_head(hb, d, s); break;
                            case Form::Recurrent: recurrent_head(hb, d, s); break;
                            case Form::Chunkwise: chunkwise_head(hb, d, C, s); break;
                            case Form::Scan: break;  // refused above
                          }
                        });
}

size_t linear_attention_workspace_floats(Form form, const FeatureMap& features,
                                         int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv,
                                         int64_t chunk) {
  const int64_t F = features.features(Dk);
  return 2 * Arena::footprint(B * T * H * F) +
         causal_linear_attention_workspace_floats(form, B, T, H, F, Dv, chunk);
}

void linear_attention_forward(Form form, const LinearAttentionArgs& a,
                              Arena& arena) {
  RETNET_CHECK(a.q.ndim == 4 && a.k.ndim == 4 && a.q.shape == a.k.shape,
               "linear attention: q and k must have the same [B, T, H, Dk] shape");
  const int64_t B = a.q.shape[0], T = a.q.shape[1], H = a.q.shape[2], Dk = a.q.shape[3];
  const int64_t F = a.features.features(Dk);
  if (B * T * H == 0) return;
  float* pq = a.saved_phi_q ? a.saved_phi_q : arena.alloc(B * T * H * F);
  float* pk = a.saved_phi_k ? a.saved_phi_k : arena.alloc(B * T * H * F);
  CausalLinearArgs k;
  k.phi_q = features_view(pq, B, T, H, F);
  k.phi_k = features_view(pk, B, T, H, F);
  k.v = a.v;
  k.out = a.out;
  k.state = a.state;
  k.state_stride = a.state_stride;
  k.rows = a.rows;
  k.chunk = a.chunk;
  k.inv_denominators = a.saved_inv_denominators;
  feature_map_forward(a.features, FeatureRole::Query, a.q, k.phi_q);
  feature_map_forward(a.features, FeatureRole::Key, a.k, k.phi_k);
  if (a.enter_slice) {
    RETNET_CHECK(form == Form::Chunkwise && a.state != nullptr,
                 "linear attention: a slice of a sequence runs the chunkwise form with a state");
    slice_summary(k, arena);
    a.enter_slice();
  }
  causal_linear_attention_forward(form, k, arena);
}

void linear_attention_reference(const FeatureMap& features, const float* q, const float* k,
                                const float* v, double* out, int64_t T, int64_t Dk, int64_t Dv,
                                const double* state, double* end_state) {
  const int64_t F = features.features(Dk), W = Dv + 1;
  std::vector<double> S(F * W, 0.0), pq(F), pk(F), x(Dk), aug(W);
  if (state) std::copy(state, state + F * W, S.begin());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < Dk; ++i) x[i] = k[t * Dk + i];
    feature_map_reference(features, FeatureRole::Key, x.data(), Dk, pk.data());
    for (int64_t i = 0; i < Dk; ++i) x[i] = q[t * Dk + i];
    feature_map_reference(features, FeatureRole::Query, x.data(), Dk, pq.data());
    std::fill(aug.begin(), aug.end(), 0.0);
    for (int64_t i = 0; i < F; ++i)
      for (int64_t j = 0; j < W; ++j) {
        S[i * W + j] += pk[i] * (j < Dv ? v[t * Dv + j] : 1.0);
        aug[j] += pq[i] * S[i * W + j];
      }
    for (int64_t j = 0; j < Dv; ++j) out[t * Dv + j] = aug[Dv] > 0 ? aug[j] / aug[Dv] : 0.0;
  }
  if (end_state) std::copy(S.begin(), S.end(), end_state);
}

}  // namespace retnet
