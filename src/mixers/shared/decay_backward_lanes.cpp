// The loops of decay attention's backward pass over one (sequence, channel block)
// (decay_backward_lanes.h), compiled once per instruction-set level (retnet/core/isa_kernels.h).
// The forward's definition is in src/include/retnet/mixers/decay_attention.h.
//
// Per channel, with weights e^{x_nm} (x_nm = k_m - (n-1-m) w for m < n, u + k_n for m = n), the
// saved log denominator L_n and wkv_n, the normalised weights are pi_nm = e^{x_nm - L_n} <= 1 and
// with G_n = d_out_n sigmoid(r_n):
//   d v_m += sum_n pi_nm G_n,   d x_nm = pi_nm G_n (v_m - wkv_n) =: beta_nm,
//   d k_m += sum_n beta_nm,  d u += sum_n beta_nn,  d w -= sum_{m<n} (n-1-m) beta_nm,
//   d r_n += d_out_n wkv_n sigmoid'(r_n).
// Pairs inside a chunk are summed directly. For m in a chunk ending at e and n >= e,
// pi_nm = e^{k_m - (e-1-m) w} e^{-(n-e) w - L_n}: the second factor summed over n gives four
// sums carried from chunk to chunk, last to first,
//   Q = sum G_n e^{...}, P = sum G_n wkv_n e^{...}, Q1 = sum (n-e) G_n e^{...}, P1 likewise,
// each stored as (sum) e^{-rho} with rho the largest exponent -(n-e) w - L_n: then every factor
// e^{k_m - (e-1-m) w + rho} is a normalised weight's bound, <= 1, and nothing overflows.
//
// A start state (sequence parallel) is one more token before the first, at m = -1, with
// e^{k} = B0 = b0 e^{p0} and value A0 / B0: its pairs give d (A, B) = (Q, -P) e^rho at boundary 0
// and d w -= e^{p0 + rho} (a0 Q1 - b0 P1). The gradient of the state the tokens leave enters the
// sweep as the carried sums at the end, (Q, P) = (dA, -dB), as if it came from later tokens.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "decay_backward_lanes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "decay_kernels.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

using detail::kCb;
using detail::channel_element;
using detail::kEmptyExponent;
using detail::pack_channels;
using detail::pack_rows;
using detail::sigmoid_fast;

using Dims = detail::ChannelDims;

// One task's chunk of packed rows, [L][kCb] each.
struct ChunkRows {
  float *K, *V, *G, *Y, *Ld, *dK, *dV;
};

ChunkRows chunk_rows(float* s, int64_t L) {
  const int64_t n = L * kCb;
  return {s, s + n, s + 2 * n, s + 3 * n, s + 4 * n, s + 5 * n, s + 6 * n};
}

// Packs tokens [t0, t0 + L) of one channel block; adds d_r there (it needs nothing else).
void load_chunk(const DecayAttentionGradArgs& a, const Dims& d, int64_t b, int64_t c0, int64_t nc,
                int64_t t0, int64_t L, const ChunkRows& rows) {
  pack_rows(a.k, b, t0, L, c0, nc, rows.K);
  pack_rows(a.v, b, t0, L, c0, nc, rows.V);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = t0 + i, saved = (b * d.T + t) * d.C + c0;
    const float* r = channel_element(a.r, b, t, c0);
    const float* dO = channel_element(a.d_out, b, t, c0);
    float* dr = channel_element(a.d_r, b, t, c0);
    float *G = rows.G + i * kCb, *Y = rows.Y + i * kCb, *Ld = rows.Ld + i * kCb;
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) {
      const float s = sigmoid_fast(r[c]), y = a.wkv[saved + c];
      G[c] = dO[c] * s;
      Y[c] = y;
      Ld[c] = a.log_denominators[saved + c];
      dr[c] += dO[c] * y * s * (1.f - s);
    }
    for (int64_t c = nc; c < kCb; ++c) G[c] = Y[c] = Ld[c] = 0.f;  // padding: no gradient
  }
  std::fill(rows.dK, rows.dK + L * kCb, 0.f);
  std::fill(rows.dV, rows.dV + L * kCb, 0.f);
}

// Calls fn(Kj, Vj, dKj, dVj, decay) for the chunk's rows j < n, with decay = n - 1 - j: the
// steps from token j to token n - 1.
template <typename Fn>
void for_each_earlier_row(const ChunkRows& rows, int64_t n, Fn fn) {
  for (int64_t j = 0; j < n; ++j) {
    fn(rows.K + j * kCb, rows.V + j * kCb, rows.dK + j * kCb, rows.dV + j * kCb,
       static_cast<float>(n - 1 - j));
  }
}

// The pairs (n, m) inside one chunk.
void chunk_pairs(const ChunkRows& rows, int64_t L, const float* w, const float* u, float* dw,
                 float* du) {
  for (int64_t i = 0; i < L; ++i) {
    const float *Ki = rows.K + i * kCb, *Vi = rows.V + i * kCb, *Gi = rows.G + i * kCb;
    const float *Yi = rows.Y + i * kCb, *Li = rows.Ld + i * kCb;
    for_each_earlier_row(rows, i, [&](const float* Kj, const float* Vj, float* dKj, float* dVj,
                                      float decay) {
#pragma omp simd
      for (int64_t c = 0; c < kCb; ++c) {
        const float t = fast_exp_nonpositive((Kj[c] - Li[c]) - decay * w[c]) * Gi[c];
        const float beta = t * (Vj[c] - Yi[c]);
        dVj[c] += t;
        dKj[c] += beta;
        dw[c] -= decay * beta;
      }
    });
    float *dKi = rows.dK + i * kCb, *dVi = rows.dV + i * kCb;
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float t = fast_exp_nonpositive((Ki[c] - Li[c]) + u[c]) * Gi[c];
      const float beta = t * (Vi[c] - Yi[c]);
      dVi[c] += t;
      dKi[c] += beta;
      du[c] += beta;
    }
  }
}

// The future's sensitivities at a chunk boundary e (see the top of the file), scaled by e^rho.
struct Carried {
  alignas(64) float rho[kCb], Q[kCb], P[kCb], Q1[kCb], P1[kCb];
  void clear() {
    std::fill(rho, rho + kCb, kEmptyExponent);
    std::fill(Q, Q + kCb, 0.f), std::fill(P, P + kCb, 0.f);
    std::fill(Q1, Q1 + kCb, 0.f), std::fill(P1, P1 + kCb, 0.f);
  }
};

// Pairs with m in this chunk [s, s + L) and n >= s + L, from the carried sums; then the sums moved
// to the boundary s, this chunk's rows included.
void cross_chunk(const ChunkRows& rows, int64_t L, const float* w, Carried& f, float* dw) {
  for_each_earlier_row(rows, L, [&](const float* Kj, const float* Vj, float* dKj, float* dVj,
                                    float decay) {
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float e = fast_exp_nonpositive((Kj[c] + f.rho[c]) - decay * w[c]);
      const float beta = e * (Vj[c] * f.Q[c] - f.P[c]);
      dVj[c] += e * f.Q[c];
      dKj[c] += beta;
      dw[c] -= decay * beta + e * (Vj[c] * f.Q1[c] - f.P1[c]);
    }
  });
  const float fL = static_cast<float>(L);
  alignas(64) float top[kCb];
#pragma omp simd
  for (int64_t c = 0; c < kCb; ++c) top[c] = f.rho[c] - fL * w[c];
  for (int64_t i = 0; i < L; ++i) {
    const float* Li = rows.Ld + i * kCb;
    const float fi = static_cast<float>(i);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) top[c] = std::max(top[c], -Li[c] - fi * w[c]);
  }
#pragma omp simd
  for (int64_t c = 0; c < kCb; ++c) {
    // Sums over n >= e moved to s: each term decays by L tokens and its distance grows by L.
    const float e = fast_exp_nonpositive((f.rho[c] - top[c]) - fL * w[c]);
    f.Q1[c] = e * (f.Q1[c] + fL * f.Q[c]);
    f.P1[c] = e * (f.P1[c] + fL * f.P[c]);
    f.Q[c] *= e;
    f.P[c] *= e;
    f.rho[c] = top[c];
  }
  for (int64_t i = 0; i < L; ++i) {
    const float *Gi = rows.G + i * kCb, *Yi = rows.Y + i * kCb, *Li = rows.Ld + i * kCb;
    const float fi = static_cast<float>(i);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) {
      const float t = fast_exp_nonpositive((-Li[c] - f.rho[c]) - fi * w[c]) * Gi[c];
      f.Q[c] += t;
      f.P[c] += t * Yi[c];
      f.Q1[c] += fi * t;
      f.P1[c] += fi * t * Yi[c];
    }
  }
}

// dst rows (t0 + i, channels [c0, c0 + nc)) += src[i][0..nc).
void add_rows(const TensorView& x, int64_t b, int64_t t0, int64_t L, int64_t c0, int64_t nc,
              const float* src) {
  for (int64_t i = 0; i < L; ++i) {
    float* row = channel_element(x, b, t0 + i, c0);
    const float* s = src + i * kCb;
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) row[c] += s[c];
  }
}

}  // namespace

// d loss / d (A, B) of the start state from one (sequence, channel block)'s tokens, as
// (x, y, rho) rows: x = sum_n G_n e^{-n w - L_n - rho}, y = -sum_n G_n wkv_n e^{...}, rho the
// largest exponent -n w - L_n.
void decay_start_state_gradient(const DecayAttentionGradArgs& a, const detail::ChannelDims& d,
                                int64_t b, int64_t c0, int64_t nc, float* out) {
  alignas(64) float rho[kCb], x[kCb] = {}, y[kCb] = {};
  std::fill(rho, rho + kCb, kEmptyExponent);
  const float* ld = a.log_denominators + b * d.T * d.C + c0;
  const float* wkv = a.wkv + b * d.T * d.C + c0;
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t c = 0; c < nc; ++c)
      rho[c] = std::max(rho[c], -static_cast<float>(t) * a.w[c0 + c] - ld[t * d.C + c]);
  for (int64_t t = 0; t < d.T; ++t) {
    const float* r = channel_element(a.r, b, t, c0);
    const float* dO = channel_element(a.d_out, b, t, c0);
    for (int64_t c = 0; c < nc; ++c) {
      const float e = (-static_cast<float>(t) * a.w[c0 + c] - ld[t * d.C + c]) - rho[c];
      const float g = fast_exp_nonpositive(e) * dO[c] * sigmoid_fast(r[c]);
      x[c] += g;
      y[c] -= g * wkv[t * d.C + c];
    }
  }
  for (int64_t c = 0; c < nc; ++c) {
    out[c0 + c] = x[c];
    out[d.C + c0 + c] = y[c];
    out[2 * d.C + c0 + c] = rho[c];
  }
}

// One (sequence, channel block): chunks last to first. The parallel form is one chunk of T.
void decay_backward_block(const DecayAttentionGradArgs& a, const detail::ChannelDims& d, int64_t b,
                          int64_t c0, int64_t nc, int64_t chunk, float* dw_out, float* du_out,
                          float* scratch) {
  alignas(64) float w[kCb], u[kCb], dw[kCb] = {}, du[kCb] = {};
  pack_channels(a.w, c0, nc, w);
  pack_channels(a.u, c0, nc, u);
  const ChunkRows rows = chunk_rows(scratch, chunk);
  Carried future;
  future.clear();
  const float* start = a.start_state ? a.start_state + b * a.state_stride : nullptr;
  if (start && a.leave_slice) {  // the leaving state's gradient, as from later tokens
    const float* end = a.d_start_state + b * a.state_stride;
    for (int64_t c = 0; c < nc; ++c) {
      future.Q[c] = end[c0 + c];
      future.P[c] = -end[d.C + c0 + c];
      future.rho[c] = end[2 * d.C + c0 + c];
    }
  }
  const int64_t last = ((d.T - 1) / chunk) * chunk;
  for (int64_t t0 = last; t0 >= 0; t0 -= chunk) {
    const int64_t L = std::min(chunk, d.T - t0);
    load_chunk(a, d, b, c0, nc, t0, L, rows);
    chunk_pairs(rows, L, w, u, dw, du);
    // Carried sums matter across chunks, and at the start state or from the leaving state.
    if (last > 0 || start) cross_chunk(rows, L, w, future, dw);
    add_rows(a.d_k, b, t0, L, c0, nc, rows.dK);
    add_rows(a.d_v, b, t0, L, c0, nc, rows.dV);
  }
  for (int64_t c = 0; start && c < nc; ++c) {  // w's share through the start state's decay
    const float a0 = start[c0 + c], b0 = start[d.C + c0 + c], p0 = start[2 * d.C + c0 + c];
    if (b0 > 0.f)
      dw[c] -= std::exp(p0 + future.rho[c]) * (a0 * future.Q1[c] - b0 * future.P1[c]);
  }
  std::memcpy(dw_out, dw, nc * sizeof(float));
  std::memcpy(du_out, du, nc * sizeof(float));
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
