// Retention over one slice of a longer sequence (sequence parallel training): the state the slice
// adds, and its backward. The powers formed are gamma^i for 0 <= i <= T, in double: they may
// underflow to 0 far from the slice's end, never overflow.
#include <algorithm>
#include <cmath>

#include "../shared/head_loop.h"
#include "retnet/core/error.h"
#include "retnet/mixers/retention.h"

namespace retnet {
namespace {

struct SliceDims {
  int64_t B, T, H, Dk, Dv;
};

SliceDims slice_dims(const TensorView& k, const TensorView& v) {
  const SliceDims d{k.shape[0], k.shape[1], k.shape[2], k.shape[3], v.shape[3]};
  RETNET_CHECK(detail::is_head_view(k, d.B, d.T, d.H, d.Dk) &&
                   detail::is_head_view(v, d.B, d.T, d.H, d.Dv),
               "retention slice: k must be [B, T, H, Dk] and v [B, T, H, Dv]");
  return d;
}

// gamma^p in double (p >= 0).
float decay_power(double gamma, int64_t p) {
  return static_cast<float>(std::exp(static_cast<double>(p) * std::log(gamma)));
}

}  // namespace

void retention_slice_decay(const double* gammas, int64_t B, int64_t T, int64_t H, int64_t Dk,
                           int64_t Dv, float* decay, int64_t state_stride) {
  const int64_t E = retention_state_floats_per_head(Dk, Dv);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      float* f = decay + b * state_stride + h * E;
      std::fill(f, f + E, decay_power(gammas[h], T));
    }
}

void retention_slice_summary(const TensorView& k, const TensorView& v, const double* gammas,
                             float* state, float* decay, int64_t state_stride) {
  const SliceDims d = slice_dims(k, v);
  const int64_t W = d.Dv + 1, E = d.Dk * W;
  retention_slice_decay(gammas, d.B, d.T, d.H, d.Dk, d.Dv, decay, state_stride);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      float* S = state + b * state_stride + h * E;
      std::fill(S, S + E, 0.f);
      for (int64_t t = 0; t < d.T; ++t) {
        const float w = decay_power(gammas[h], d.T - 1 - t);
        const float* kt = &k.at(b, t, h, 0);
        const float* vt = &v.at(b, t, h, 0);
        for (int64_t i = 0; i < d.Dk; ++i) {
          const float kw = kt[i] * w;
          float* row = S + i * W;
#pragma omp simd
          for (int64_t j = 0; j < d.Dv; ++j) row[j] += kw * vt[j];
          row[d.Dv] += kw;
        }
      }
    }
}

void retention_slice_summary_backward(const TensorView& k, const TensorView& v,
                                      const double* gammas, const float* d_state,
                                      int64_t state_stride, const TensorView& d_k,
                                      const TensorView& d_v) {
  const SliceDims d = slice_dims(k, v);
  RETNET_CHECK(detail::is_head_view(d_k, d.B, d.T, d.H, d.Dk) &&
                   detail::is_head_view(d_v, d.B, d.T, d.H, d.Dv),
               "retention slice: d_k must be [B, T, H, Dk] and d_v [B, T, H, Dv]");
  const int64_t W = d.Dv + 1, E = d.Dk * W;
  // Token t's share of the summary is gamma^(T-1-t) k_t [v_t, 1]^T: its gradient reads dS once
  // per token, dk_t += w dS [v_t, 1], dv_t += w dS[:, :Dv]^T k_t.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const float* dS = d_state + b * state_stride + h * E;
      for (int64_t t = 0; t < d.T; ++t) {
        const float w = decay_power(gammas[h], d.T - 1 - t);
        const float* kt = &k.at(b, t, h, 0);
        const float* vt = &v.at(b, t, h, 0);
        float* dk = &d_k.at(b, t, h, 0);
        float* dv = &d_v.at(b, t, h, 0);
        for (int64_t i = 0; i < d.Dk; ++i) {
          const float* row = dS + i * W;
          float s = row[d.Dv];
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < d.Dv; ++j) s += row[j] * vt[j];
          dk[i] += w * s;
          const float kw = kt[i] * w;
#pragma omp simd
          for (int64_t j = 0; j < d.Dv; ++j) dv[j] += kw * row[j];
        }
      }
    }
}

}  // namespace retnet
