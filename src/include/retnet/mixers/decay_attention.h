#pragma once
// Channel-wise decay attention: RWKV-4's WKV with a receptance gate, and with w = u = 0 the simple
// attention-free transformer (AFT-simple), in three forms that compute the same function
// (RWKV, Peng et al. 2023: per-channel decay and a bonus for the current token).
//
// Per channel c (channels are independent; no heads), tokens n = 0, 1, ... counted from the start
// of the state, with a decay rate w >= 0 and a bonus u for the current token:
//   wkv_n = (sum_{m<n} e^{k_m - (n-1-m) w} v_m + e^{u + k_n} v_n)
//         / (sum_{m<n} e^{k_m - (n-1-m) w}     + e^{u + k_n})
//   out_n = sigmoid(r_n) wkv_n
// The newest previous token is not decayed; w = 0 means no decay. With w = u = 0 this is
// AFT-simple: a running average of v weighted by e^{k_m} over m <= n, gated by sigmoid(q_n).
//
// No exponential is ever taken of anything but (exponent - row maximum) <= 0, so nothing overflows
// at any length or key magnitude. The state of a channel is RWKV-4's (a, b, p): the sums over the
// tokens seen, A = sum_m e^{k_m - (n-1-m) w} v_m = a e^p and B = b e^p, scaled by a running maximum
// exponent p. The empty state is a = b = 0 (p is then ignored): a non-empty state always has
// b >= e^0 from its largest term, so b = 0 means "no tokens", and a zero-initialised state is the
// empty state (a fresh p = 0 would otherwise pose as a maximum: with k_n = -1e4 both e^{p - M}
// and e^{u + k_n - M} terms would underflow and give 0 / 0). Layout per sequence: 3 * C floats
// [3][C] (all a, then all b, then all p) at state + b * state_stride, so per-channel updates
// vectorise.
//
// Forms:
//  - parallel: the pairwise definition over all T tokens from an empty state, one row maximum per
//    (token, channel) kept by the recurrence R_{n+1} = max(R_n - w, k_n); O(T^2 C) exponentials.
//    It neither reads nor writes `state`.
//  - recurrent: RWKV-4's kernel, one token at a time through the state; O(T C).
//  - chunkwise: the pairwise form inside chunks of `chunk` tokens (the last may be short), with the
//    state entering the chunk as one more term; the state is updated once per chunk; O(T chunk C).
// Recurrent and chunkwise continue from `state` and leave the state after the last token.
// On a CPU the recurrent form is the fastest (a vectorised scan over channels, O(T C)); the
// pairwise forms are the training forms. Exponents stay accurate at any key size: the pairwise
// forms subtract the decay from (k_m - row maximum), a small number, and the recurrent form folds
// the rounding of p - w (up to 5e-4 at |p| ~ 1e4) into a and b rather than leaving it in p.
//
// Shapes: r, k, v, out: [B, T, C] views with unit stride in the last dim, any other strides;
// w, u: [C]. OpenMP over (sequence, block of kDecayChannelBlock channels); scratch from the arena.
#include <cstdint>
#include <functional>
#include <string>

#include "retnet/core/arena.h"
#include "retnet/core/form.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/core/tensor.h"

namespace retnet {


// Channels per task: one cache line of each row per 16 channels, two AVX-512 vectors.
inline constexpr int64_t kDecayChannelBlock = 32;
inline int64_t decay_attention_state_floats(int64_t C) { return 3 * C; }

struct DecayAttentionArgs {
  TensorView r, k, v, out;   // [B, T, C]
  const float* w = nullptr;  // [C], >= 0 (the caller's guarantee)
  const float* u = nullptr;  // [C]
  float* state = nullptr;    // required by recurrent and chunkwise: [3][C] per sequence
  int64_t state_stride = 0;
  // The row of the state each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
  int64_t chunk = 64;
  // What the backward pass needs, or nullptr (inference), both [B, T, C] contiguous: wkv_n and
  // the log of the denominator, log(sum_m e^{...}), per token and channel.
  float* saved_wkv = nullptr;
  float* saved_log_denominators = nullptr;
};
size_t decay_attention_workspace_floats(Form form, int64_t B, int64_t T, int64_t C,
                                        int64_t chunk);
void decay_attention_forward(Form form, const DecayAttentionArgs& args, Arena& arena);

// Backward of the parallel or chunkwise form from an empty state (training; a start state: see
// below): accumulates (+=) into d_r, d_k, d_v ([B, T, C]) and d_w, d_u ([C], summed over sequences
// and tokens). With the
// normalised weights pi_nm = e^{log weight_nm - log denominator_n} and G_n = d_out_n sigmoid(r_n),
// the gradient of the log weight of (n, m) is pi_nm G_n (v_m - wkv_n); k_m, u and -(n-1-m) w
// collect it. The chunkwise backward sweeps the chunks last to first, carrying the future's
// sensitivities (four sums over n >= chunk end, scaled by their own running maximum exponent):
// no [T, T] buffer, O(T chunk C) work.
//
// Sequence parallel (retnet/model/slice_link.h, chunkwise form): the forward runs from the state
// the earlier slices leave and the backward adds the gradient coming back from the later ones.
// With true sums (A, B) = (a e^p, b e^p), a slice of L tokens maps the state entering it to
// e^{-L w} (A, B) + (the state its tokens leave from an empty one). Gradient records mirror it:
// d loss / d (A, B) = (x e^rho, y e^rho), the state leaving from the one entering by the same map
// transposed, so both pass between slices as records [4][C] per sequence, rows (a, b, p, log
// decay) or (x, y, rho, log decay), combined by decay_attention_combine_records.
struct DecayAttentionGradArgs {
  TensorView r, k, v, d_out;                // [B, T, C]
  TensorView d_r, d_k, d_v;                 // [B, T, C], accumulated into
  const float* w = nullptr;                 // [C]
  const float* u = nullptr;                 // [C]
  float* d_w = nullptr;                     // [C], accumulated into
  float* d_u = nullptr;                     // [C], accumulated into
  const float* wkv = nullptr;               // [B, T, C] saved by the forward
  const float* log_denominators = nullptr;  // [B, T, C] saved by the forward
  int64_t chunk = 64;
  // Sequence parallel, chunkwise only (both or neither): the state the tokens started from, as the
  // forward's ([3][C] per sequence at state_stride), and where d loss / d (A, B) of it from these
  // tokens goes as (x, y, rho) rows ([3][C] at state_stride, overwritten). Then leave_slice, if
  // set, is called once, and must replace d_start_state by d loss / d (the state these tokens
  // leave) from later tokens, in the same form; the backward adds what that gives k, v and w.
  const float* start_state = nullptr;
  float* d_start_state = nullptr;
  int64_t state_stride = 0;
  std::function<void()> leave_slice;
};
size_t decay_attention_backward_workspace_floats(Form form, int64_t B, int64_t T,
                                                 int64_t C, int64_t chunk);
void decay_attention_backward(Form form, const DecayAttentionGradArgs& args,
                              Arena& arena);

// Sequence parallel records (see above): [4][C] per sequence, `stride` floats apart.
inline constexpr int64_t kDecaySliceRecordRows = 4;
// The state the T tokens of k, v ([B, T, C]) leave from an empty one, as (a, b, p) rows, and the
// log decay -T w, into each sequence's record.
void decay_attention_slice_record(const TensorView& k, const TensorView& v, const float* w,
                                  float* records, int64_t stride);
// The record of no tokens: empty sums (a = b = 0, p the empty exponent), log decay 0.
void decay_attention_empty_records(float* records, int64_t sequences, int64_t C, int64_t stride);
// acc <- acc (+) x for `sequences` records: x's slice after acc's,
//   p = max(p_acc + logdecay_x, p_x),
//   (a, b) = e^{p_acc + logdecay_x - p} (a, b)_acc + e^{p_x - p} (a, b)_x,
//   logdecay = logdecay_acc + logdecay_x;
// both exponents are <= 0, so nothing overflows. Associative (up to rounding), not commutative.
void decay_attention_combine_records(float* acc, const float* x, int64_t sequences, int64_t C,
                                     int64_t stride);

// Double-precision definition, for tests: one sequence, contiguous r, k, v [T, C], from the state
// `state` [3][C] in the layout above (nullptr: empty) -> out [T, C]. Direct sums with one maximum
// per row, no recurrence. The state after the last token goes to `end_state` ([3][C], p the
// largest exponent of its sums) if not null.
void decay_attention_reference(const float* r, const float* k, const float* v, const float* w,
                               const float* u, double* out, int64_t T, int64_t C,
                               const double* state = nullptr, double* end_state = nullptr);

}  // namespace retnet
