#pragma once
// Inner loops shared by the attention forward, backward and decode kernels (internal header).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../shared/head_loop.h"
#include "attention_row_kernels.h"
#include "retnet/core/error.h"
#include "retnet/core/tensor.h"

namespace retnet::attention_detail {

// x[j] = exp(x[j] - shift) for j < n, shift >= max(x) (so the arguments are <= 0); returns their
// sum. The row kernels run at kernel_isa()'s level (attention_row_kernels.cpp).
inline float exp_shifted_sum(float* x, int64_t n, float shift) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), attention_exp_shifted_sum);
  return kernel(x, n, shift);
}

inline float max_of(const float* x, int64_t n, float init) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), attention_max_of);
  return kernel(x, n, init);
}

// Checks that q: [B, T, H, Dk], k: [B, T, Hkv, Dk], v: [B, T, Hkv, Dv] and out: [B, T, H, Dv]
// agree, with unit last stride. Hkv = H unless `grouped` (the KV-cache kernels: kv heads shared
// by groups of G = H / Hkv query heads; query head h reads kv head h / G).
struct Dims {
  int64_t B, T, H, Dk, Dv, Hkv = H;
  int64_t groups() const { return H / Hkv; }
};
inline Dims check_dims(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const char* what, bool grouped = false) {
  Dims d{q.shape[0], q.shape[1], q.shape[2], q.shape[3], v.shape[3], k.shape[2]};
  if (!grouped || d.Hkv < 1 || d.H % d.Hkv != 0) d.Hkv = d.H;
  auto same = [&](const TensorView& t, int64_t heads, int64_t last) {
    return detail::is_head_view(t, d.B, d.T, heads, last) && t.data != nullptr;
  };
  RETNET_CHECK(same(q, d.H, d.Dk) && same(k, d.Hkv, d.Dk) && same(v, d.Hkv, d.Dv) &&
                   same(out, d.H, d.Dv),
               "{}: q must be [B, T, H, Dk], k [B, T, Hkv, Dk], v [B, T, Hkv, Dv] and out "
               "[B, T, H, Dv] with unit stride in the last dim (Hkv = H{}); got q [{}, {}, {}, {}], "
               "k [{}, {}, {}, {}], v [{}, {}, {}, {}], out [{}, {}, {}, {}]",
               what, grouped ? ", or a divisor of H" : "", q.shape[0], q.shape[1], q.shape[2],
               q.shape[3], k.shape[0], k.shape[1], k.shape[2], k.shape[3], v.shape[0], v.shape[1],
               v.shape[2], v.shape[3], out.shape[0], out.shape[1], out.shape[2], out.shape[3]);
  RETNET_CHECK(d.Dk >= 1 && d.Dv >= 1, "{}: head dims must be positive, got Dk {} and Dv {}", what,
               d.Dk, d.Dv);
  return d;
}

inline size_t thread_slots() { return static_cast<size_t>(std::max(omp_get_max_threads(), 1)); }

}  // namespace retnet::attention_detail
