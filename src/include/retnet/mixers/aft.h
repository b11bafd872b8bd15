#pragma once
// The attention-free transformer, AFT-full (Zhai et al. 2021, "An Attention Free Transformer"): channel-wise "attention"
// with a learned pairwise position bias and a sigmoid query gate; no heads, no dot products.
//
// For a query at absolute position n (0 = the first token ever fed to the cache), per channel c:
//   w_nm = bias[min(n - m, L - 1)]                       (m <= n; clamped, so any length works)
//   y_nc = sigmoid(q_nc) * sum_{m<=n} exp(w_nm + k_mc) v_mc / sum_{m<=n} exp(w_nm + k_mc)
// i.e. per (query, channel) a softmax over the keys of the exponents e_nmc = w_nm + k_mc, weighting
// the values. bias holds L >= 1 floats, one per distance 0 .. L - 1; farther keys share bias[L-1].
//
// Numerics: every (query, channel) keeps its own running maximum M_nc = max_m e_nmc (an online
// softmax along the keys, as attention does per row), so every exponential has a nonpositive
// argument and the largest term is exactly 1: no overflow or underflow of the dominant term for
// any k or bias. The cheaper factorisation exp(w_nm - max w) exp(k_mc - max k) (one GEMM) was not
// taken: it loses the dominant term when the largest w and the largest k belong to different keys
// (e.g. bias +-50 with |k| ~ 1e3: each factor underflows alone, their product need not), and the
// key maximum must then range over the visible keys only. The price is one exponential per
// (query, key, channel), O(T^2 C / 2) of them; each update costs one exp (the online step picks
// exp(-|e - M|) as either the new term or the rescale of the old sums).
//
// Training (aft_forward / aft_backward): tasks are (sequence, channel block of
// kAftChannelBlock, query tile); a task walks key tiles up to its last query, its scratch is
// O(tile * kAftChannelBlock): no [T, T] or [T, T, C] buffer. The forward saves per (n, c) the
// maximum M, the denominator D = sum_m exp(e_nmc - M) and the ungated ratio r = N / D; the
// backward recomputes each weight exp(e - M) / D exactly from them.
//
// Decoding keeps every key and value in a cache that grows with the sequence (aft_step,
// aft_prefill), like softmax attention's: a step costs O(cached tokens * C).
//
// Shapes: q, k, v, out: [B, T, C] (views, any row stride, unit last stride); bias: [L].
#include <cstdint>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/core/tensor.h"

namespace retnet {

// Queries per tile and keys per tile: 64 keys x 64 channels of k and v is 32 KiB, an L1/L2-sized
// block reused by every query of the tile.
inline constexpr int64_t kAftDefaultTile = 64;
// Channels per task: four AVX-512 vectors per row of the online-softmax state.
inline constexpr int64_t kAftChannelBlock = 64;

struct AftArgs {
  TensorView q, k, v, out;      // [B, T, C]
  const float* bias = nullptr;  // [L]
  int64_t L = 0;                // entries of bias (maximum distance + 1), >= 1
  // Saved for the backward pass, each [B, T, C] contiguous (aft_saved_floats(B, T, C) floats in
  // all): the maximum exponent M, the denominator D relative to it, the ungated output r = N / D.
  // All three or none (nullptr).
  float* row_max = nullptr;
  float* denominator = nullptr;
  float* ratio = nullptr;
  int64_t tile = kAftDefaultTile;  // queries and keys per tile (T need not be a multiple)
};

// Floats of the three saved buffers together: 3 * B * T * C.
inline int64_t aft_saved_floats(int64_t B, int64_t T, int64_t C) { return 3 * B * T * C; }

// Scratch floats aft_forward (and aft_prefill) take from the arena: O(tile * kAftChannelBlock)
// per thread, independent of T.
size_t aft_workspace_floats(int64_t tile);

// The forward from position 0 over all B sequences; OpenMP over (B, channel blocks, query tiles).
void aft_forward(const AftArgs& args, Arena& arena);

// Backward pass, for the loss sum(out * d_out): with p_nmc = exp(e_nmc - M_nc) / D_nc and
// g_nc = d_out_nc sigmoid(q_nc),
//   d_q_nc += d_out_nc r_nc sigmoid'(q_nc),   d_v_mc += sum_n p_nmc g_nc,
//   de_nmc  = p_nmc g_nc (v_mc - r_nc),       d_k_mc += sum_n de_nmc,
//   d_bias[min(n - m, L - 1)] += sum_c de_nmc.
// Accumulates (+=) into d_q, d_k, d_v ([B, T, C]) and d_bias ([L]). Tasks are (sequence, channel
// block, key tile), so each task owns its d_k and d_v rows; d_bias is summed per thread (double).
struct AftGradArgs {
  TensorView q, k, v, d_out;
  TensorView d_q, d_k, d_v;
  const float* bias = nullptr;
  float* d_bias = nullptr;  // [L]
  int64_t L = 0;
  const float* row_max = nullptr;      // [B, T, C] from the forward
  const float* denominator = nullptr;  // [B, T, C]
  const float* ratio = nullptr;        // [B, T, C]
  int64_t tile = kAftDefaultTile;
};
size_t aft_backward_workspace_floats(int64_t L, int64_t tile);
void aft_backward(const AftGradArgs& args, Arena& arena);

// ---- key/value cache ---------------------------------------------------------------------------
// One contiguous block per sequence: `capacity` token rows, row t = k [C] then v [C] of token t.
// Token-major, so the first n tokens are a prefix of the block: saving or restoring a sequence is
// one memcpy of aft_cache_floats(C, n) floats, and growing the capacity keeps every row in place
// within its block.
inline int64_t aft_cache_floats(int64_t C, int64_t tokens) { return tokens * 2 * C; }

struct AftCache {
  float* data = nullptr;      // B blocks of aft_cache_floats(C, capacity) floats
  int64_t capacity = 0;       // tokens each block holds
  int64_t* length = nullptr;  // [B] tokens cached per sequence; step and prefill advance it
  // The row of the cache each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
};

// How the cache grows: the kernels never allocate; they throw Error when a sequence would pass
// `capacity`. Callers that own the storage call aft_cache_reserve before a step or a prefill: it
// returns at once while there is room (no allocation per step) and otherwise at least doubles the
// capacity, moving each sequence's rows to its new block (amortised O(1) per token).
// `cache.data` then points into `storage`.
void aft_cache_reserve(AftCache& cache, std::vector<float>& storage, int64_t B, int64_t C,
                       int64_t new_tokens);

// Scratch floats aft_step takes from the arena (independent of the cache length).
size_t aft_step_workspace_floats(int64_t B, int64_t C);

// One new token per sequence (q, k, v, out: [B, 1, C]): appends k, v to each sequence's cache and
// computes the output at position length[b] over its length[b] + 1 cached tokens. Each sequence's
// tokens are split across threads, partial online softmaxes (per channel) merged.
void aft_step(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
              AftCache& cache, const float* bias, int64_t L, Arena& arena);

// T new tokens per sequence ([B, T, C]), continuing from what the cache holds: appends k, v and
// runs the tiled forward with queries at positions length[b] .. length[b] + T - 1. Prefill in
// pieces equals one prefill equals aft_forward. Scratch: aft_workspace_floats(tile).
void aft_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& out, AftCache& cache, const float* bias, int64_t L, Arena& arena,
                 int64_t tile = kAftDefaultTile);

// Naive double-precision definition, for tests: q [T, C] of one sequence, contiguous, queries at
// positions past .. past + T - 1 over the keys and values k, v [past + T, C] of positions
// 0 .. past + T - 1 (past: what a cache holds before them); out [T, C].
void aft_reference(const float* q, const float* k, const float* v, const float* bias, int64_t L,
                   double* out, int64_t T, int64_t C, int64_t past = 0);

}  // namespace retnet
