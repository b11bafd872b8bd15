// AFT-full's forward kernels: the tiled online-softmax forward (training and prefill), the
// key/value cache, the decode step and the double reference. Definition:
// src/include/retnet/mixers/aft.h.
#include "retnet/mixers/aft.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../shared/head_loop.h"
#include "../shared/token_cache.h"
#include "aft_kernels.h"
#include "aft_rows.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

using namespace aft_detail;

// Keys one decode task folds at least (shorter splits cost more to merge than they save).
constexpr int64_t kDecodeBlock = 256;

// One sequence: queries [Tq, C] at absolute positions pos0 .. pos0 + Tq - 1; keys and values
// [pos0 + Tq, C] from position 0 (row strides ld*); saved buffers [Tq, C] (row stride C) or null.
struct SequenceOperands : detail::HeadRows {
  float* row_max;
  float* denominator;
  float* ratio;
  int64_t pos0;
};

// Per thread: the online-softmax state [tile, kAftChannelBlock] x (max, numerator, denominator).
size_t forward_scratch(int64_t tile) { return 3 * tile * kAftChannelBlock; }

// Query rows [i0, i0 + Lq) and channels [c0, c0 + width) of one sequence: key tiles up to the last
// query's position, each key row of the tile folded into every query that sees it.
void forward_query_tile(const SequenceOperands& s, int64_t i0, int64_t Lq, int64_t c0,
                        int64_t width, int64_t tile, int64_t C, const float* bias, int64_t L,
                        float* scratch) {
  constexpr int64_t W = kAftChannelBlock;
  float* M = scratch;
  float* num = M + tile * W;
  float* den = num + tile * W;
  std::fill(M, M + Lq * W, -std::numeric_limits<float>::infinity());
  std::fill(num, num + Lq * W, 0.f);
  std::fill(den, den + Lq * W, 0.f);
  static const auto fold_keys = RETNET_ISA_VARIANT(kernel_isa(), aft_fold_keys);
  static const auto gated_ratio = RETNET_ISA_VARIANT(kernel_isa(), aft_gated_ratio);
  const int64_t first = s.pos0 + i0;  // position of the tile's first query
  const int64_t keys = first + Lq;    // keys visible to its last query
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    const int64_t j1 = std::min(j0 + tile, keys);
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t n = first + i, end = std::min(j1, n + 1);
      fold_keys(s.k + c0, s.ldk, s.v + c0, s.ldv, j0, end, n, bias, L, M + i * W, num + i * W,
                den + i * W, width);
    }
  }
  for (int64_t i = 0; i < Lq; ++i) {
    const float* q = s.q + (i0 + i) * s.ldq + c0;
    float* out = s.out + (i0 + i) * s.ldo + c0;
    const float* nu = num + i * W;
    const float* de = den + i * W;
    gated_ratio(q, nu, de, out, width);
    if (s.row_max) {
      const int64_t at = (i0 + i) * C + c0;
      std::copy_n(M + i * W, width, s.row_max + at);
      std::copy_n(de, width, s.denominator + at);
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) s.ratio[at + c] = nu[c] / de[c];
    }
  }
}

// Runs every (sequence, channel block, query tile) of a forward; operands(b) gives a sequence's
// pointers. Later query tiles see more keys, so tasks run last tile first (dynamic schedule).
template <typename Operands>
void run_query_tiles(const Dims& d, int64_t tile, const float* bias, int64_t L, Arena& arena,
                     Operands operands) {
  const int64_t tiles = (d.T + tile - 1) / tile;
  const int64_t blocks = channel_blocks(d.C, kAftChannelBlock);
  const int64_t tasks = d.B * blocks * tiles;
  const size_t per_slot = forward_scratch(tile);
  float* scratch = arena.alloc(per_slot * thread_slots());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t t = tasks - 1 - task;
    const int64_t i0 = (t % tiles) * tile, block = (t / tiles) % blocks, b = t / (tiles * blocks);
    const int64_t c0 = block * kAftChannelBlock;
    forward_query_tile(operands(b), i0, std::min(tile, d.T - i0), c0,
                       std::min(kAftChannelBlock, d.C - c0), tile, d.C, bias, L,
                       scratch + per_slot * omp_get_thread_num());
  }
}

// ---- key/value cache -------------------------------------------------------------------------
void check_room(const AftCache& cache, const Dims& d, const char* what) {
  check_cache_room(cache, d.B, d.T, what, "AFT", "aft_cache_reserve");
}

float* cache_block(const AftCache& c, int64_t C, int64_t b) {
  return c.data + sequence_row(c.rows, b) * aft_cache_floats(C, c.capacity);
}

// Copies the T new keys and values of every sequence into rows length[b] .. of its block.
void append_to_cache(const TensorView& k, const TensorView& v, const AftCache& cache,
                     const Dims& d) {
  for (int64_t b = 0; b < d.B; ++b) {
    float* block = cache_block(cache, d.C, b);
    for (int64_t t = 0; t < d.T; ++t) {
      float* dst = block + (cache.length[b] + t) * 2 * d.C;
      std::memcpy(dst, &k.at(b, t, 0), d.C * sizeof(float));
      std::memcpy(dst + d.C, &v.at(b, t, 0), d.C * sizeof(float));
    }
  }
}

// ---- decode ------------------------------------------------------------------------------------
// A step's tokens are split into ranges, one task each (sequence b, split s); a task streams its
// cache rows front to back and keeps a partial online softmax per channel. The partials of a
// sequence are then merged. So one sequence uses every thread and reads its cache contiguously.

// A task's partial result: [3, C] = running max, numerator, denominator.
int64_t partial_floats(int64_t C) { return 3 * C; }

// Tokens [begin, end) of a sequence whose query is at position n; rows: its cache block.
void decode_range(const float* rows, int64_t C, int64_t n, int64_t begin, int64_t end,
                  const float* bias, int64_t L, float* partial) {
  float* M = partial;
  float* num = M + C;
  float* den = num + C;
  std::fill(M, M + C, -std::numeric_limits<float>::infinity());
  std::fill(num, num + 2 * C, 0.f);
  static const auto fold_keys = RETNET_ISA_VARIANT(kernel_isa(), aft_fold_keys);
  // A cached token's row: its keys [C], then its values [C].
  fold_keys(rows, 2 * C, rows + C, 2 * C, begin, end, n, bias, L, M, num, den, C);
}

// Splits per sequence: enough to keep every thread busy, none shorter than a block.
int64_t decode_splits(int64_t B, int64_t longest) {
  const int64_t threads = static_cast<int64_t>(thread_slots());
  const int64_t per_sequence = (threads + B - 1) / B;
  return std::clamp<int64_t>((longest + kDecodeBlock - 1) / kDecodeBlock, 1, per_sequence);
}

}  // namespace

size_t aft_workspace_floats(int64_t tile) {
  return Arena::footprint(forward_scratch(std::max<int64_t>(tile, 1)) * thread_slots());
}

void aft_forward(const AftArgs& a, Arena& arena) {
  const Dims d = check_dims(a.q, a.k, a.v, a.out, "aft_forward");
  check_bias(a.bias, a.L, "aft_forward");
  RETNET_CHECK(a.tile >= 1, "aft_forward: tile must be at least 1, got {}", a.tile);
  const bool saving = a.row_max != nullptr;
  RETNET_CHECK(saving == (a.denominator != nullptr) && saving == (a.ratio != nullptr),
               "aft_forward: row_max, denominator and ratio are saved together; give all three "
               "or none");
  if (d.B == 0 || d.T == 0) return;
  // The tile sizes the scratch; a smaller T does not shrink it, so the workspace stays valid.
  run_query_tiles(d, a.tile, a.bias, a.L, arena, [&](int64_t b) {
    const int64_t saved = b * d.T * d.C;
    const detail::HeadRows rows{&a.q.at(b, 0, 0), &a.k.at(b, 0, 0), &a.v.at(b, 0, 0),
                                &a.out.at(b, 0, 0), a.q.stride[1],    a.k.stride[1],
                                a.v.stride[1],      a.out.stride[1]};
    return SequenceOperands{rows, saving ? a.row_max + saved : nullptr,
                            saving ? a.denominator + saved : nullptr,
                            saving ? a.ratio + saved : nullptr, 0};
  });
}

void aft_cache_reserve(AftCache& cache, std::vector<float>& storage, int64_t B, int64_t C,
                       int64_t new_tokens) {
  RETNET_CHECK(B >= 0 && C >= 1 && new_tokens >= 0,
               "aft_cache_reserve: bad sizes B {}, C {}, new tokens {}", B, C, new_tokens);
  reserve_cache_tokens(cache, storage, B, new_tokens, aft_cache_floats(C, 1), "aft_cache_reserve");
}

size_t aft_step_workspace_floats(int64_t B, int64_t C) {
  const size_t splits = std::max<size_t>((thread_slots() + B - 1) / std::max<int64_t>(B, 1), 1);
  return Arena::footprint(std::max<int64_t>(B, 1) * splits * partial_floats(C));
}

void aft_step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              AftCache& cache, const float* bias, int64_t L, Arena& arena) {
  const Dims d = check_dims(q, k, v, out, "aft_step");
  RETNET_CHECK(d.T == 1, "aft_step takes one token per sequence, got {}", d.T);
  check_bias(bias, L, "aft_step");
  if (d.B == 0) return;
  check_room(cache, d, "aft_step");
  append_to_cache(k, v, cache, d);
  int64_t longest = 0;
  for (int64_t b = 0; b < d.B; ++b) longest = std::max(longest, cache.length[b] + 1);
  const int64_t S = decode_splits(d.B, longest);
  float* partials = arena.alloc(d.B * S * partial_floats(d.C));  // [B, S, 3, C]
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.B * S; ++t) {
    const int64_t b = t / S, s = t % S, tokens = cache.length[b] + 1;
    decode_range(cache_block(cache, d.C, b), d.C, tokens - 1, tokens * s / S, tokens * (s + 1) / S,
                 bias, L, partials + t * partial_floats(d.C));
  }
  static const auto merge_partials = RETNET_ISA_VARIANT(kernel_isa(), aft_merge_partials);
  for (int64_t b = 0; b < d.B; ++b) {
    merge_partials(partials + b * S * partial_floats(d.C), S, d.C, &q.at(b, 0, 0),
                   &out.at(b, 0, 0));
    cache.length[b] += 1;
  }
}

void aft_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& out, AftCache& cache, const float* bias, int64_t L, Arena& arena,
                 int64_t tile) {
  const Dims d = check_dims(q, k, v, out, "aft_prefill");
  check_bias(bias, L, "aft_prefill");
  RETNET_CHECK(tile >= 1, "aft_prefill: tile must be at least 1, got {}", tile);
  if (d.B == 0 || d.T == 0) return;
  check_room(cache, d, "aft_prefill");
  append_to_cache(k, v, cache, d);
  const int64_t row = aft_cache_floats(d.C, 1);
  run_query_tiles(d, tile, bias, L, arena, [&](int64_t b) {
    const float* block = cache_block(cache, d.C, b);
    const detail::HeadRows rows{&q.at(b, 0, 0), block, block + d.C, &out.at(b, 0, 0),
                                q.stride[1],    row,   row,         out.stride[1]};
    return SequenceOperands{rows, nullptr, nullptr, nullptr, cache.length[b]};
  });
  for (int64_t b = 0; b < d.B; ++b) cache.length[b] += d.T;
}

void aft_reference(const float* q, const float* k, const float* v, const float* bias, int64_t L,
                   double* out, int64_t T, int64_t C, int64_t past) {
  std::vector<double> e(past + T);
  for (int64_t n = 0; n < T; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t at = past + n;  // the query's position, and its own key's row
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= at; ++j) {
        e[j] = double(bias[std::min(at - j, L - 1)]) + double(k[j * C + c]);
        m = std::max(m, e[j]);
      }
      double num = 0, den = 0;
      for (int64_t j = 0; j <= at; ++j) {
        const double p = std::exp(e[j] - m);
        num += p * double(v[j * C + c]);
        den += p;
      }
      out[n * C + c] = num / den / (1 + std::exp(-double(q[n * C + c])));
    }
}

}  // namespace retnet
