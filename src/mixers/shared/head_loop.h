#pragma once
// Internal to src/mixers: runs a per-(sequence, head) task over all B * H heads.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "retnet/core/arena.h"
#include "retnet/core/tensor.h"

namespace retnet::detail {

// Whether t is a [B, T, H, last] view with unit stride in the last dim: what the per-head kernels
// read, one row of `last` floats per token, rows stride[1] apart.
inline bool is_head_view(const TensorView& t, int64_t B, int64_t T, int64_t H, int64_t last) {
  return t.ndim == 4 && t.shape[0] == B && t.shape[1] == T && t.shape[2] == H &&
         t.shape[3] == last && t.stride[3] == 1;
}

// One head of one sequence in a forward kernel's views: where the q, k, v and out rows start,
// and their row strides. The kernels add what else they read.
struct HeadRows {
  const float *q, *k, *v;
  float* out;
  int64_t ldq, ldk, ldv, ldo;
};

// Head h of sequence b in the [B, T, H, *] views of q, k, v and out.
inline HeadRows head_rows(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, int64_t b, int64_t h) {
  return {&q.at(b, 0, h, 0), &k.at(b, 0, h, 0), &v.at(b, 0, h, 0), &out.at(b, 0, h, 0),
          q.stride[1],       k.stride[1],       v.stride[1],       out.stride[1]};
}

// One head of one sequence in a backward kernel's [B, T, H, *] views: where each operand's and
// gradient's rows start, and their row strides (ld*). The kernels add what else they read.
struct HeadGradRows {
  const float *q, *k, *v, *out, *d_out;
  float *d_q, *d_k, *d_v;
  int64_t ldq, ldk, ldv, ldo, ld_do, ld_dq, ld_dk, ld_dv;
};

// Head h of sequence b in the views of q, k, v, out, d_out and of the gradients d_q, d_k, d_v.
inline HeadGradRows head_grad_rows(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const TensorView& d_out,
                                   const TensorView& d_q, const TensorView& d_k,
                                   const TensorView& d_v, int64_t b, int64_t h) {
  auto row = [&](const TensorView& t) { return &t.at(b, 0, h, 0); };
  auto ld = [](const TensorView& t) { return t.stride[1]; };
  return {row(q), row(k), row(v), row(out), row(d_out), row(d_q), row(d_k), row(d_v),
          ld(q),  ld(k),  ld(v),  ld(out),  ld(d_out),  ld(d_q),  ld(d_k),  ld(d_v)};
}

// For the backward of a normalised linear-attention head (o_t = scale_t A_t[:Dv] with values
// augmented by a constant 1): rows [L, Dv + 1] of G = [s_t dO_t, c_t (dO_t . o_t)] and of
// Vaug = [v_t, 1] for tokens [t0, t0 + L), where scales(t) gives {s_t, c_t}.
template <typename Scales>
void augmented_grad_rows(const HeadGradRows& g, int64_t t0, int64_t L, int64_t Dv, float* G,
                         float* vaug, Scales scales) {
  const int64_t W = Dv + 1;
  for (int64_t j = 0; j < L; ++j) {
    const int64_t t = t0 + j;
    const float* dO = g.d_out + t * g.ld_do;
    const float* o = g.out + t * g.ldo;
    const auto [s, c_dot] = scales(t);
    float dot = 0.f;
    for (int64_t c = 0; c < Dv; ++c) {
      G[j * W + c] = s * dO[c];
      dot += dO[c] * o[c];
    }
    G[j * W + Dv] = c_dot * dot;
    std::memcpy(vaug + j * W, g.v + t * g.ldv, Dv * sizeof(float));
    vaug[j * W + Dv] = 1.f;
  }
}

// Floats rounded up to whole 64-byte lines.
inline size_t round_to_cache_line(size_t floats) { return (floats + 15) / 16 * 16; }

// Runs fn(b, h, scratch, next_is_mine) for every head, each task with `scratch_per_head` floats of
// its own. With at least as many heads as threads, heads run in parallel (BLAS then runs
// single-threaded inside our region); otherwise one at a time, and BLAS and inner loops use all
// the threads. Each thread takes one contiguous range of tasks, the same range on every call with
// the same B and H: a head's recurrent state then stays with one core from step to step instead of
// moving between caches (measured: a dynamic schedule was slower when decoding). next_is_mine:
// task t + 1 runs on the same thread right after this one (what a prefetch of it may assume).
template <typename Fn>
void for_each_head_in_order(int64_t B, int64_t H, Arena& arena, size_t scratch_per_head, Fn fn) {
  const int64_t tasks = B * H;
  const int threads = omp_get_max_threads();
  const bool heads_in_parallel = tasks >= threads && threads > 1;
  // Tasks without scratch take nothing from the arena (it may be empty). Each thread's scratch
  // starts on its own cache line: a head's recurrent step writes its sums at every row, and a
  // line shared with the next thread's inputs would move between the cores at every row.
  const size_t per = round_to_cache_line(scratch_per_head);
  float* scratch = per ? arena.alloc(per * (heads_in_parallel ? threads : 1)) : nullptr;
  if (heads_in_parallel) {
#pragma omp parallel
    {
      const int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
      const int64_t begin = tasks * i / n, end = tasks * (i + 1) / n;
      for (int64_t t = begin; t < end; ++t) fn(t / H, t % H, scratch + per * i, t + 1 < end);
    }
  } else {
    for (int64_t t = 0; t < tasks; ++t) fn(t / H, t % H, scratch, t + 1 < tasks);
  }
}

// Runs fn(b, h, scratch) for every head (see for_each_head_in_order).
template <typename Fn>
void for_each_head(int64_t B, int64_t H, Arena& arena, size_t scratch_per_head, Fn fn) {
  for_each_head_in_order(B, H, arena, scratch_per_head,
                         [&](int64_t b, int64_t h, float* s, bool) { fn(b, h, s); });
}

// Arena floats for_each_head takes for `scratch_per_head`.
inline size_t head_loop_footprint(int64_t B, int64_t H, size_t scratch_per_head) {
  const int64_t threads = omp_get_max_threads();
  const bool heads_in_parallel = B * H >= threads && threads > 1;
  const size_t per = round_to_cache_line(scratch_per_head);
  return per ? Arena::footprint(per * (heads_in_parallel ? threads : 1)) : 0;
}

// The most arena floats for_each_head can take for `scratch_per_head`, whatever B and H: for
// workspace sizes computed before the batch is known.
inline size_t head_loop_footprint_bound(size_t scratch_per_head) {
  const size_t threads = static_cast<size_t>(std::max(omp_get_max_threads(), 1));
  return Arena::footprint(round_to_cache_line(scratch_per_head) * threads);
}

}  // namespace retnet::detail
