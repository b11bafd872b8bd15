// Softmax attention's forward kernels: the tiled online-softmax forward (training and prefill),
// the KV-cache decode step and the double reference. Definition:
// src/include/retnet/mixers/attention.h.
#include "retnet/mixers/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../shared/token_cache.h"
#include "attention_decode_kernels.h"
#include "attention_kernels.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/ops/fast_exp.h"

namespace retnet {
namespace {

using namespace attention_detail;

constexpr int64_t kDecodeBlock = kAttentionDecodeBlock;

// One head of one sequence: queries [Tq, Dk] at absolute positions pos0 .. pos0 + Tq - 1; keys
// [pos0 + Tq, Dk] and values [pos0 + Tq, Dv] from position 0 (row strides ld*).
struct HeadOperands : detail::HeadRows {
  float* lse;  // per query, stride ld_lse; or nullptr
  int64_t ld_lse;
  int64_t pos0;
  int64_t window;  // 0: every earlier key
};

size_t forward_scratch(int64_t tile) { return tile * tile + 2 * tile; }

// Folds one tile of scores into the running softmax of its rows. S [Lq, Lk] holds scaled scores
// of queries at positions first .. first + Lq - 1 against keys j0 .. j0 + Lk - 1; on return it
// holds the unnormalised probabilities exp(s - running max), 0 where masked. `out` rows (the
// running weighted sums) are rescaled where the maximum moved.
void online_softmax_tile(float* S, int64_t Lq, int64_t Lk, int64_t first, int64_t j0,
                         int64_t window, float* row_max, float* row_sum, float* out, int64_t ldo,
                         int64_t Dv) {
  for (int64_t i = 0; i < Lq; ++i) {
    float* s = S + i * Lk;
    // Keys after the query are masked; in a tile wholly below the diagonal all Lk are visible.
    // With a window, so are the keys before it (s[0, before)).
    const int64_t visible = std::clamp<int64_t>(first + i - j0 + 1, 0, Lk);
    const int64_t before =
        window > 0 ? std::clamp<int64_t>(first + i - window + 1 - j0, 0, visible) : 0;
    std::fill(s + visible, s + Lk, 0.f);
    std::fill(s, s + before, 0.f);
    if (visible == before) continue;
    s += before;
    const int64_t seen = visible - before;
    const float m = max_of(s, seen, row_max[i]);
    // row_max starts at -inf (exp gives 0); key 0 is visible to every query in the first tile, so
    // m is finite from there on.
    const float correction = fast_exp_nonpositive(row_max[i] - m);
    row_sum[i] = row_sum[i] * correction + exp_shifted_sum(s, seen, m);
    row_max[i] = m;
    if (correction != 1.f) {
      float* o = out + i * ldo;
#pragma omp simd
      for (int64_t c = 0; c < Dv; ++c) o[c] *= correction;
    }
  }
}

// Query rows [i0, i0 + Lq) of one head, FlashAttention-2 order: for each key tile up to the last
// query's position, S = scale Q K^T, the online softmax update, out += P V. `out` itself is the
// accumulator. scratch: S [tile, tile], row_max [tile], row_sum [tile].
void forward_query_tile(const HeadOperands& h, int64_t i0, int64_t Lq, int64_t tile, int64_t Dk,
                        int64_t Dv, float* scratch) {
  float* S = scratch;
  float* row_max = S + tile * tile;
  float* row_sum = row_max + tile;
  const float scale = 1.f / std::sqrt(static_cast<float>(Dk));
  const float* q = h.q + i0 * h.ldq;
  float* out = h.out + i0 * h.ldo;
  for (int64_t i = 0; i < Lq; ++i) std::fill(out + i * h.ldo, out + i * h.ldo + Dv, 0.f);
  std::fill(row_max, row_max + Lq, -std::numeric_limits<float>::infinity());
  std::fill(row_sum, row_sum + Lq, 0.f);
  const int64_t first = h.pos0 + i0;  // position of the tile's first query
  const int64_t keys = first + Lq;    // keys visible to its last query
  // With a window, the first key its first query sees (tiles before it are wholly masked).
  const int64_t start = h.window > 0 ? std::max<int64_t>(first - h.window + 1, 0) : 0;
  for (int64_t j0 = start; j0 < keys; j0 += tile) {
    const int64_t Lk = std::min(tile, keys - j0);
    sgemm(Trans::No, Trans::Yes, Lq, Lk, Dk, scale, q, h.ldq, h.k + j0 * h.ldk, h.ldk, 0.f, S, Lk);
    online_softmax_tile(S, Lq, Lk, first, j0, h.window, row_max, row_sum, out, h.ldo, Dv);
    sgemm(Trans::No, Trans::No, Lq, Dv, Lk, 1.f, S, Lk, h.v + j0 * h.ldv, h.ldv, 1.f, out, h.ldo);
  }
  for (int64_t i = 0; i < Lq; ++i) {
    const float inv = 1.f / row_sum[i];
    float* o = out + i * h.ldo;
#pragma omp simd
    for (int64_t c = 0; c < Dv; ++c) o[c] *= inv;
    if (h.lse) h.lse[(i0 + i) * h.ld_lse] = row_max[i] + std::log(row_sum[i]);
  }
}

// Runs every (sequence, head, query tile) of a forward; operands(b, h) gives a head's pointers.
// Later query tiles see more keys, so tasks run last tile first for a balanced dynamic schedule.
template <typename Operands>
void run_query_tiles(const Dims& d, int64_t tile, Arena& arena, Operands operands) {
  const int64_t tiles = (d.T + tile - 1) / tile;
  const int64_t tasks = d.B * d.H * tiles;
  const size_t per_slot = forward_scratch(tile);
  float* scratch = arena.alloc(per_slot * thread_slots());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t t = tasks - 1 - task;
    const int64_t bh = t / tiles, i0 = (t % tiles) * tile;
    const HeadOperands h = operands(bh / d.H, bh % d.H);
    forward_query_tile(h, i0, std::min(tile, d.T - i0), tile, d.Dk, d.Dv,
                       scratch + per_slot * omp_get_thread_num());
  }
}

// ---- KV cache --------------------------------------------------------------------------------
// A cached token: its kv heads' keys [Hkv, Dk], then values [Hkv, Dv].
int64_t cache_row(const Dims& d) { return d.Hkv * (d.Dk + d.Dv); }

void check_room(const AttentionCache& cache, const Dims& d, const char* what) {
  check_cache_room(cache, d.B, d.T, what, "KV", "attention_cache_reserve");
}

// Sequence b's block of the cache.
float* cache_block(const AttentionCache& c, const Dims& d, int64_t b) {
  return c.data + sequence_row(c.rows, b) * c.capacity * cache_row(d);
}

// Copies the T new keys and values of every sequence into rows length[b] .. of its block.
void append_to_cache(const TensorView& k, const TensorView& v, const AttentionCache& cache,
                     const Dims& d) {
  const int64_t row = cache_row(d);
  for (int64_t b = 0; b < d.B; ++b) {
    float* block = cache_block(cache, d, b);
    for (int64_t t = 0; t < d.T; ++t) {
      float* dst = block + (cache.length[b] + t) * row;
      for (int64_t h = 0; h < d.Hkv; ++h) {
        std::memcpy(dst + h * d.Dk, &k.at(b, t, h, 0), d.Dk * sizeof(float));
        std::memcpy(dst + d.Hkv * d.Dk + h * d.Dv, &v.at(b, t, h, 0), d.Dv * sizeof(float));
      }
    }
  }
}

// The cached keys and values that query head h of sequence b reads (its kv head's): rows
// cache_row(d) floats apart.
const float* cache_keys(const AttentionCache& c, const Dims& d, int64_t b, int64_t h) {
  return cache_block(c, d, b) + (h / d.groups()) * d.Dk;
}
const float* cache_values(const AttentionCache& c, const Dims& d, int64_t b, int64_t h) {
  return cache_block(c, d, b) + d.Hkv * d.Dk + (h / d.groups()) * d.Dv;
}

// ---- decode: flash-decoding over the token-major cache ------------------------------------
// A step's tokens are split into ranges, one task each (sequence b, split s), whose partial
// softmaxes are then merged (attention_decode_kernels.cpp): so one sequence uses every thread, and
// the cache is streamed contiguously, which is what a memory-bound step needs.

// A task's partial result per head: [H, Dv + 2] = weighted values, then max, then sum.
int64_t partial_floats(const Dims& d) { return d.H * (d.Dv + 2); }

// Splits per sequence: enough to keep every thread busy, none shorter than a block.
int64_t decode_splits(int64_t B, int64_t longest) {
  const int64_t threads = static_cast<int64_t>(thread_slots());
  const int64_t per_sequence = (threads + B - 1) / B;
  return std::clamp<int64_t>((longest + kDecodeBlock - 1) / kDecodeBlock, 1, per_sequence);
}

}  // namespace

size_t attention_workspace_floats(int64_t T, int64_t /*Dk*/, int64_t /*Dv*/, int64_t tile) {
  const int64_t t = std::clamp<int64_t>(tile, 1, std::max<int64_t>(T, 1));
  return Arena::footprint(forward_scratch(t) * thread_slots());
}

void attention_forward(const AttentionArgs& a, Arena& arena) {
  const Dims d = check_dims(a.q, a.k, a.v, a.out, "attention_forward");
  RETNET_CHECK(a.tile >= 1, "attention_forward: tile must be at least 1, got {}", a.tile);
  if (d.B == 0 || d.T == 0 || d.H == 0) return;
  const int64_t tile = std::min(a.tile, d.T);
  run_query_tiles(d, tile, arena, [&](int64_t b, int64_t h) {
    return HeadOperands{detail::head_rows(a.q, a.k, a.v, a.out, b, h),
                        a.logsumexp ? a.logsumexp + b * d.T * d.H + h : nullptr, d.H, 0,
                        a.window};
  });
}

void attention_cache_reserve(AttentionCache& cache, std::vector<float>& storage, int64_t B,
                             int64_t H, int64_t Dk, int64_t Dv, int64_t new_tokens) {
  RETNET_CHECK(B >= 0 && H >= 1 && Dk >= 1 && Dv >= 1 && new_tokens >= 0,
               "attention_cache_reserve: bad sizes B {}, H {}, Dk {}, Dv {}, new tokens {}", B, H,
               Dk, Dv, new_tokens);
  reserve_cache_tokens(cache, storage, B, new_tokens, H * (Dk + Dv), "attention_cache_reserve");
}

size_t attention_step_workspace_floats(int64_t B, int64_t H, int64_t Dv) {
  const size_t splits = std::max<size_t>((thread_slots() + B - 1) / std::max<int64_t>(B, 1), 1);
  return Arena::footprint(B * splits * H * (Dv + 2)) +
         Arena::footprint(H * kDecodeBlock * thread_slots());
}

void attention_step(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, AttentionCache& cache, Arena& arena, int64_t window) {
  const Dims d = check_dims(q, k, v, out, "attention_step", true);
  RETNET_CHECK(d.T == 1, "attention_step takes one token per sequence, got {}", d.T);
  if (d.B == 0 || d.H == 0) return;
  check_room(cache, d, "attention_step");
  append_to_cache(k, v, cache, d);
  int64_t longest = 0;
  for (int64_t b = 0; b < d.B; ++b) longest = std::max(longest, cache.length[b] + 1);
  const int64_t S = decode_splits(d.B, longest);
  float* partials = arena.alloc(d.B * S * partial_floats(d));        // [B, S, H, Dv + 2]
  float* scores = arena.alloc(d.H * kDecodeBlock * thread_slots());  // per thread [H, block]
  static const auto decode_range = RETNET_ISA_VARIANT(kernel_isa(), attention_decode_range);
  static const auto merge_partials = RETNET_ISA_VARIANT(kernel_isa(), attention_merge_partials);
  const AttentionDecodeShape shape{d.H, d.Hkv, d.Dk, d.Dv};
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.B * S; ++t) {
    const int64_t b = t / S, s = t % S, L = cache.length[b] + 1;
    const int64_t first = window > 0 ? std::max<int64_t>(L - window, 0) : 0;  // seen: [first, L)
    decode_range(&q.at(b, 0, 0, 0), q.stride[2], cache_block(cache, d, b), shape,
                 first + (L - first) * s / S, first + (L - first) * (s + 1) / S,
                 scores + d.H * kDecodeBlock * omp_get_thread_num(),
                 partials + t * partial_floats(d));
  }
  for (int64_t t = 0; t < d.B * d.H; ++t) {
    const int64_t b = t / d.H, h = t % d.H;
    merge_partials(partials + b * S * partial_floats(d), S, shape, h, &out.at(b, 0, h, 0));
  }
  for (int64_t b = 0; b < d.B; ++b) cache.length[b] += 1;
}

void attention_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, AttentionCache& cache, Arena& arena, int64_t tile,
                       int64_t window) {
  const Dims d = check_dims(q, k, v, out, "attention_prefill", true);
  RETNET_CHECK(tile >= 1, "attention_prefill: tile must be at least 1, got {}", tile);
  if (d.B == 0 || d.T == 0 || d.H == 0) return;
  check_room(cache, d, "attention_prefill");
  append_to_cache(k, v, cache, d);
  const int64_t row = cache_row(d);
  run_query_tiles(d, std::min(tile, d.T), arena, [&](int64_t b, int64_t h) {
    const detail::HeadRows rows{&q.at(b, 0, h, 0), cache_keys(cache, d, b, h),
                                cache_values(cache, d, b, h), &out.at(b, 0, h, 0),
                                q.stride[1], row, row, out.stride[1]};
    return HeadOperands{rows, nullptr, 0, cache.length[b], window};
  });
  for (int64_t b = 0; b < d.B; ++b) cache.length[b] += d.T;
}

void attention_chunkwise(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, AttentionCache& cache, Arena& arena, int64_t chunk,
                         int64_t tile, int64_t window) {
  RETNET_CHECK(chunk >= 1, "attention_chunkwise: chunk must be at least 1, got {}", chunk);
  const int64_t T = q.shape[1];
  // Tokens [t0, t0 + L) of every sequence: the same views, L rows from row t0.
  auto rows = [](TensorView t, int64_t t0, int64_t L) {
    t.data += t0 * t.stride[1];
    t.shape[1] = L;
    return t;
  };
  const size_t mark = arena.used();  // each chunk reuses the same scratch
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t L = std::min(chunk, T - t0);
    arena.rewind(mark);
    // The prefill appends the chunk, then runs its queries against the cache it extended.
    attention_prefill(rows(q, t0, L), rows(k, t0, L), rows(v, t0, L), rows(out, t0, L), cache,
                      arena, tile, window);
  }
}

void attention_reference(const float* q, const float* k, const float* v, double* out, int64_t T,
                         int64_t Dk, int64_t Dv, double* logsumexp, int64_t window,
                         int64_t past) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dk));
  std::vector<double> s(past + T);
  for (int64_t n = 0; n < T; ++n) {
    const int64_t at = past + n;  // the query's position, and its own key's row
    double m = -std::numeric_limits<double>::infinity();
    const int64_t first = window > 0 ? std::max<int64_t>(at - window + 1, 0) : 0;
    for (int64_t j = first; j <= at; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < Dk; ++i) dot += double(q[n * Dk + i]) * double(k[j * Dk + i]);
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (int64_t j = first; j <= at; ++j) sum += (s[j] = std::exp(s[j] - m));
    for (int64_t c = 0; c < Dv; ++c) {
      double o = 0;
      for (int64_t j = first; j <= at; ++j) o += s[j] * double(v[j * Dv + c]);
      out[n * Dv + c] = o / sum;
    }
    if (logsumexp) logsumexp[n] = m + std::log(sum);
  }
}

}  // namespace retnet
