#pragma once
// Internal to src/mixers/shared/decay_*.cpp: shape checks, the (sequence, channel block) task
// loop and the packing of one block of channels into contiguous, padded rows.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/tensor.h"
#include "retnet/mixers/decay_attention.h"
#include "retnet/ops/fast_exp.h"

namespace retnet::detail {

constexpr int64_t kCb = kDecayChannelBlock;
// The exponent of an empty sum: far below any real one, yet finite, so that differences and
// decays of it stay finite (no inf - inf) and its exponential is 0.
constexpr float kEmptyExponent = -1e38f;

// Whether t is a [B, T, C] view with unit stride in the last dim.
inline bool is_channel_view(const TensorView& t, int64_t B, int64_t T, int64_t C) {
  return t.ndim == 3 && t.shape[0] == B && t.shape[1] == T && t.shape[2] == C && t.stride[2] == 1;
}

// B, T and C of one call, read from k, which must be [B, T, C]; `op` names the call in the error.
struct ChannelDims {
  int64_t B, T, C;
};

inline ChannelDims channel_dims(const TensorView& k, const char* op) {
  RETNET_CHECK(k.ndim == 3, "{}: k must be [B, T, C], got {} dims", op, k.ndim);
  return {k.shape[0], k.shape[1], k.shape[2]};
}

inline void check_channel_view(const TensorView& t, int64_t B, int64_t T, int64_t C,
                               const char* name) {
  RETNET_CHECK(is_channel_view(t, B, T, C),
               "decay attention: {} is [{}, {}, {}] (ndim {}, last stride {}), expected [{}, {}, "
               "{}] with unit stride in the last dim",
               name, t.shape[0], t.shape[1], t.shape[2], t.ndim, t.stride[2], B, T, C);
}

// Checks each named view against check_channel_view, in order.
inline void check_channel_views(
    const ChannelDims& d, std::initializer_list<std::pair<const TensorView*, const char*>> views) {
  for (const auto& [t, name] : views) check_channel_view(*t, d.B, d.T, d.C, name);
}

inline int64_t channel_blocks(int64_t C) { return (C + kCb - 1) / kCb; }

// Per-task scratch rounded to whole cache lines, so every task's block stays 64-byte aligned.
inline size_t aligned_floats(size_t n) { return Arena::footprint(n); }

inline int64_t block_threads(int64_t tasks) {
  return std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), tasks));
}

// Arena floats for_each_channel_block takes.
inline size_t channel_loop_footprint(int64_t B, int64_t C, size_t per_task) {
  return per_task ? aligned_floats(per_task) * block_threads(B * channel_blocks(C)) : 0;
}

// Runs fn(b, c0, nc, scratch) for every sequence b and block of channels [c0, c0 + nc), in
// parallel (dynamic schedule: blocks of the same cost, but threads may be shared), each thread
// with `per_task` floats of its own.
template <typename Fn>
void for_each_channel_block(int64_t B, int64_t C, Arena& arena, size_t per_task, Fn fn) {
  const int64_t blocks = channel_blocks(C), tasks = B * blocks;
  const int threads = static_cast<int>(block_threads(tasks));
  const size_t per = per_task ? aligned_floats(per_task) : 0;
  float* scratch = per ? arena.alloc(per * threads) : nullptr;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / blocks, c0 = (t % blocks) * kCb;
    fn(b, c0, std::min(kCb, C - c0), per ? scratch + per * omp_get_thread_num() : nullptr);
  }
}

// The helpers below are static: the per-level kernel files include them too, and an out-of-line
// copy must stay in its own object (retnet/core/isa_kernels.h). For the same reason they address
// a [B, T, C] view by its strides rather than through TensorView::at, which a compiler may emit
// out of line as one copy for every level.
// &x[b, t, c].
static inline float* channel_element(const TensorView& x, int64_t b, int64_t t, int64_t c) {
  return x.data + b * x.stride[0] + t * x.stride[1] + c * x.stride[2];
}

// dst[i][0..kCb) = src row (t0 + i), channels [c0, c0 + nc), zero beyond nc.
static inline void pack_rows(const TensorView& x, int64_t b, int64_t t0, int64_t L, int64_t c0,
                             int64_t nc, float* dst) {
  for (int64_t i = 0; i < L; ++i) {
    const float* row = channel_element(x, b, t0 + i, c0);
    float* d = dst + i * kCb;
    for (int64_t c = 0; c < nc; ++c) d[c] = row[c];
    for (int64_t c = nc; c < kCb; ++c) d[c] = 0.f;
  }
}

// dst[c] = src[c0 + c] for c < nc, else 0.
static inline void pack_channels(const float* src, int64_t c0, int64_t nc, float* dst) {
  for (int64_t c = 0; c < kCb; ++c) dst[c] = c < nc ? src[c0 + c] : 0.f;
}

// sigmoid through fast_exp: for r << 0 the clamped exponential gives ~1e-38, not inf.
#pragma omp declare simd notinbranch
static inline float sigmoid_fast(float r) { return 1.f / (1.f + fast_exp(-r)); }

}  // namespace retnet::detail
