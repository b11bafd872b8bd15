#pragma once
// Retention, the token mixer of RetNet, in four forms that compute the same function.
//
// Per head, with rotated queries q'_n, scaled and rotated keys k'_m, decay gamma and absolute
// positions n, m (0 = the first token ever fed to the state):
//   A_n = sum_{m<=n} gamma^(n-m) (q'_n . k'_m) [v_m, 1]        (d_v + 1 columns)
//   S_n = sum_{i=0..n} gamma^i
//   o_n = (A_n[:d_v] / sqrt(S_n)) / max(|A_n[d_v]| / sqrt(S_n), 1)
// i.e. the paper's three normalisations: the decay mask divided by sqrt of its row sum, then by the
// clamped absolute row sum of the scores. Appending a constant 1 to every value makes the row sum
// the last column of the same product, so every form carries it exactly: the recurrent, chunkwise
// and scan states are d_k x (d_v + 1), the last column being the decayed key sum z_n. Hence all
// forms agree to float rounding at any eps. No form evaluates gamma^(-n); the only powers formed are
// gamma^i for 0 <= i <= max(T, chunk), which can underflow harmlessly but never overflow.
//
// Shapes: q, k: [B, T, H, Dk]; v: [B, T, H, Dv]; out: [B, T, H, Dv] (views, any row stride).
// state: per sequence b, H blocks of [Dk, Dv + 1] floats starting at state + b * state_stride.
// positions[b]: absolute position of the first of the T tokens of sequence b (nullptr: all 0).
#include <cstdint>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/form.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/core/tensor.h"

namespace retnet {


struct RetentionArgs {
  TensorView q, k, v, out;
  const double* gammas = nullptr;  // [H]
  float* state = nullptr;          // required by recurrent, chunkwise and scan; unused by parallel
  int64_t state_stride = 0;
  // The row of the state each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
  const int64_t* positions = nullptr;
  int64_t chunk = 64;          // chunkwise: tokens per chunk (T need not be a multiple)
  int64_t scan_tile = 0;       // scan: tokens scanned at once (0: chosen from a memory budget)
  float* row_stats = nullptr;  // [B, T, H, 2] saved for the backward pass, or nullptr
  // false: o_n = A_n[:d_v], plain retention without the normalisations (flash-linear-attention's
  // RetNet); the states keep their key-sum column, so both variants share state files.
  bool normalize_scores = true;
};

// Backward pass of the parallel or chunkwise form (the training forms), through the whole
// definition including the score normalisation's clamp (the row stats carry whether the forward
// normalised). Reads the forward's inputs, its output
// `out` and its row_stats; accumulates (+=) into d_q, d_k, d_v ([B, T, H, D] views). Starts from an
// empty state at position 0. The chunkwise backward sweeps the chunks forward (query gradients
// from the state) and backward (key and value gradients from the state's gradient): no T x T buffer.
struct RetentionGradArgs {
  TensorView q, k, v, out, d_out;
  TensorView d_q, d_k, d_v;
  const float* row_stats = nullptr;  // [B, T, H, 2] from the forward
  const double* gammas = nullptr;
  int64_t chunk = 64;
  // Chunkwise only: the state the forward started from (per sequence b, H blocks of [Dk, Dv + 1]
  // at start_state + b * state_stride; nullptr: empty), and where d loss / d start_state goes
  // (same layout, overwritten; nullptr: not wanted).
  const float* start_state = nullptr;
  float* d_start_state = nullptr;
  int64_t state_stride = 0;
};
size_t retention_backward_workspace_floats(Form form, int64_t T, int64_t Dk, int64_t Dv,
                                           int64_t chunk);
void retention_backward(Form form, const RetentionGradArgs& args, Arena& arena);

// Sequence parallel (retnet/model/slice_link.h): the state T tokens leave when they start from an
// empty state, sum_i gamma^(T-1-i) k_i [v_i, 1]^T per head, into `state` (the layout of
// RetentionArgs::state), and the decay gamma^T that multiplies a state entering them, into `decay`
// (the same layout: every element of head h's block).
void retention_slice_summary(const TensorView& k, const TensorView& v, const double* gammas,
                             float* state, float* decay, int64_t state_stride);
// The decays alone (as retention_slice_summary writes them) of a slice of T tokens, for B sequences
// of H heads of [Dk, Dv + 1].
void retention_slice_decay(const double* gammas, int64_t B, int64_t T, int64_t H, int64_t Dk,
                           int64_t Dv, float* decay, int64_t state_stride);
// Its backward: with d_state = d loss / d (the summary), accumulates (+=) into d_k, d_v.
void retention_slice_summary_backward(const TensorView& k, const TensorView& v,
                                      const double* gammas, const float* d_state,
                                      int64_t state_stride, const TensorView& d_k,
                                      const TensorView& d_v);

inline int64_t retention_state_floats_per_head(int64_t Dk, int64_t Dv) { return Dk * (Dv + 1); }

// Scratch floats the form needs from the arena for the given sizes.
size_t retention_workspace_floats(Form form, int64_t B, int64_t T, int64_t H, int64_t Dk,
                                  int64_t Dv, int64_t chunk, int64_t scan_tile);

// Runs `form`. The parallel form requires positions == 0 (it starts from an empty state); the
// others continue from `state` and leave it holding the state after the last token.
void retention_forward(Form form, const RetentionArgs& args, Arena& arena);

// S_n = sum_{i=0..n} gamma^i, evaluated without forming a growing power.
double retention_decay_sum(double gamma, int64_t n);

// Double-precision recurrence over the same definition, for tests: q, k [T, Dk], v [T, Dv] of one
// head, contiguous; out [T, Dv].
void retention_reference(const float* q, const float* k, const float* v, double* out, int64_t T,
                         int64_t Dk, int64_t Dv, double gamma, bool normalize_scores = true);
// The same recurrence in double throughout, continuing a head's state: the first token at
// absolute position `position`, from `state` [Dk, Dv + 1] (a head block of RetentionArgs::state),
// which is left holding the state after the last token.
void retention_reference(const double* q, const double* k, const double* v, double* out,
                         int64_t T, int64_t Dk, int64_t Dv, double gamma, bool normalize_scores,
                         double* state, int64_t position);

}  // namespace retnet
