#pragma once
// Softmax attention, the baseline token mixer: causal, multi-head, scores scaled by 1 / sqrt(Dk).
//
// Per head, for a query at absolute position n (0 = the first token ever fed to the cache):
//   s_nm = (q_n . k_m) / sqrt(Dk) for m <= n,   o_n = sum_m softmax_m(s_n.) v_m.
// With a sliding window W > 0 (every kernel's `window`; 0: none) only n - W < m <= n are seen.
// Rotary positions are applied by the caller to q and k beforehand; nothing here rotates.
//
// Training (attention_forward / attention_backward) runs FlashAttention-2's tiled online softmax:
// query tiles x key tiles, a running row maximum and sum, tiles above the diagonal skipped. The
// T x T scores are never stored whole: scratch is O(tile^2) per thread. The forward saves the row
// logsumexp, from which the backward recomputes each tile's probabilities exactly.
//
// Decoding keeps every key and value in a cache that grows with the sequence (attention_step,
// attention_prefill); a step costs O(cached tokens), unlike retention's constant-size state.
//
// Shapes: q, k: [B, T, H, Dk]; v, out: [B, T, H, Dv] (views, any row stride, unit last stride).
#include <cstdint>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/core/tensor.h"

namespace retnet {

// 128: large enough that OpenBLAS's per-call overhead on the tile products stays small, while a
// tile's scratch (2 x 64 KiB) stays in L2; 64 is slower forward and backward
// (docs/attention-kernels.md).
inline constexpr int64_t kAttentionDefaultTile = 128;

struct AttentionArgs {
  TensorView q, k, v, out;
  float* logsumexp = nullptr;            // [B, T, H] saved for the backward pass, or nullptr
  int64_t tile = kAttentionDefaultTile;  // queries and keys per tile (T need not be a multiple)
  int64_t window = 0;                    // keys a query sees, itself included (0: all)
};

// Scratch floats attention_forward (and attention_prefill) take from the arena.
size_t attention_workspace_floats(int64_t T, int64_t Dk, int64_t Dv, int64_t tile);

// The tiled forward from position 0 over all B sequences; OpenMP over (B, H, query tiles).
void attention_forward(const AttentionArgs& args, Arena& arena);

// Backward pass: recomputes each tile's probabilities from q, k and the saved logsumexp, with
// D_n = dO_n . o_n; accumulates (+=) into d_q, d_k ([B, T, H, Dk]) and d_v ([B, T, H, Dv]).
struct AttentionGradArgs {
  TensorView q, k, v, out, d_out;
  TensorView d_q, d_k, d_v;
  const float* logsumexp = nullptr;  // [B, T, H] from the forward
  int64_t tile = kAttentionDefaultTile;
  int64_t window = 0;  // as the forward's
};
size_t attention_backward_workspace_floats(int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv,
                                           int64_t tile);
void attention_backward(const AttentionGradArgs& args, Arena& arena);

// ---- KV cache -----------------------------------------------------------------------------
// One contiguous block per sequence: `capacity` token rows, row t = keys [Hkv, Dk] then values
// [Hkv, Dv] of token t (Hkv: the kv heads, each shared by H / Hkv query heads; Hkv = H without
// grouping; the functions below that take H mean the cached heads, Hkv). Token-major, so the first n tokens are a prefix of the block: saving or
// restoring a sequence is one memcpy of attention_cache_floats(H, Dk, Dv, n) floats, and growing
// the capacity keeps every row where it is within its block.
inline int64_t attention_cache_floats(int64_t H, int64_t Dk, int64_t Dv, int64_t tokens) {
  return tokens * H * (Dk + Dv);
}

struct AttentionCache {
  float* data = nullptr;      // B blocks of attention_cache_floats(H, Dk, Dv, capacity) floats
  int64_t capacity = 0;       // tokens each block holds
  int64_t* length = nullptr;  // [B] tokens cached per sequence; step and prefill advance it
  // The row of the cache each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
};

// How the cache grows: the kernels never allocate; they throw Error when a sequence would pass
// `capacity`. Callers that own the storage call attention_cache_reserve before a step or a prefill:
// it returns at once while there is room (the common case: no allocation per step) and otherwise
// at least doubles the capacity, moving each sequence's cached rows to its new block (amortised
// O(1) per token). `cache.data` then points into `storage`.
void attention_cache_reserve(AttentionCache& cache, std::vector<float>& storage, int64_t B,
                             int64_t H, int64_t Dk, int64_t Dv, int64_t new_tokens);

// Scratch floats attention_step takes from the arena (independent of the cache length).
size_t attention_step_workspace_floats(int64_t B, int64_t H, int64_t Dv);

// One new token per sequence (q, out: [B, 1, H, D]; k, v: [B, 1, Hkv, D] with Hkv dividing H,
// query head h reading kv head h / (H / Hkv)): appends k, v to each sequence's cache
// and attends over its length + 1 cached tokens. Flash-decoding: each sequence's tokens are split
// across threads (all heads read together from each cache row), partial softmaxes merged.
void attention_step(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, AttentionCache& cache, Arena& arena,
                    int64_t window = 0);

// T new tokens per sequence (q, out [B, T, H, D]; k, v [B, T, Hkv, D] as attention_step's),
// continuing from what the cache holds: appends k, v
// and runs the tiled forward with queries at positions length[b] .. length[b] + T - 1. Prefill in
// chunks equals one prefill. Scratch: attention_workspace_floats(T, Dk, Dv, tile).
void attention_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, AttentionCache& cache, Arena& arena,
                       int64_t tile = kAttentionDefaultTile, int64_t window = 0);

// The chunkwise form: T tokens per sequence in chunks of `chunk`; each chunk's queries attend
// causally to the chunk's own keys and to all the cache holds (the earlier chunks and what came
// before), then its keys and values join the cache. Chunk by chunk equals one attention_prefill
// to float precision. Scratch: attention_workspace_floats(T, Dk, Dv, tile).
void attention_chunkwise(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, AttentionCache& cache, Arena& arena, int64_t chunk,
                         int64_t tile = kAttentionDefaultTile, int64_t window = 0);

// Naive double-precision definition, for tests: q [T, Dk] of one head, contiguous, queries at
// positions past .. past + T - 1 over the keys k [past + T, Dk] and values v [past + T, Dv] of
// positions 0 .. past + T - 1 (past: what a cache holds before them); out [T, Dv]; logsumexp [T]
// if not null.
void attention_reference(const float* q, const float* k, const float* v, double* out, int64_t T,
                         int64_t Dk, int64_t Dv, double* logsumexp = nullptr,
                         int64_t window = 0, int64_t past = 0);

}  // namespace retnet
