#pragma once
// What the AFT-full forward, backward and decode kernels share (internal header); their loops over
// channels are the per-level aft_rows.cpp.
// Definition and numerics: src/include/retnet/mixers/aft.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "retnet/core/error.h"
#include "retnet/core/tensor.h"

namespace retnet::aft_detail {

inline size_t thread_slots() { return static_cast<size_t>(std::max(omp_get_max_threads(), 1)); }

// Checks that q, k, v, out are [B, T, C] views with unit last stride; returns (B, T, C).
struct Dims {
  int64_t B, T, C;
};
inline Dims check_dims(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const char* what) {
  const Dims d{q.shape[0], q.shape[1], q.shape[2]};
  auto same = [&](const TensorView& t) {
    return t.ndim == 3 && t.shape[0] == d.B && t.shape[1] == d.T && t.shape[2] == d.C &&
           t.stride[2] == 1 && t.data != nullptr;
  };
  RETNET_CHECK(same(q) && same(k) && same(v) && same(out),
               "{}: q, k, v and out must be [B, T, C] views with unit stride in the last dim; "
               "got q [{}, {}, {}] ({} dims), k [{}, {}, {}], v [{}, {}, {}], out [{}, {}, {}]",
               what, q.shape[0], q.shape[1], q.shape[2], q.ndim, k.shape[0], k.shape[1], k.shape[2],
               v.shape[0], v.shape[1], v.shape[2], out.shape[0], out.shape[1], out.shape[2]);
  RETNET_CHECK(d.C >= 1, "{}: C must be positive, got {}", what, d.C);
  return d;
}

inline void check_bias(const float* bias, int64_t L, const char* what) {
  RETNET_CHECK(bias != nullptr && L >= 1,
               "{}: the position bias needs L >= 1 entries, got L {} ({})", what, L,
               bias ? "non-null" : "null pointer");
}

inline int64_t channel_blocks(int64_t C, int64_t block) { return (C + block - 1) / block; }

}  // namespace retnet::aft_detail
