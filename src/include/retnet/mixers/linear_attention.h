#pragma once
// Causal kernelised attention: the linear transformer (feature map elu+1) and the Performer
// (FAVOR+), in three forms that compute the same function (Katharopoulos et al. 2020; Choromanski et al. 2021 for FAVOR+).
//
// Per head, with a feature map phi of F features (src/include/retnet/mixers/feature_maps.h):
//   A_n = phi(q_n) (S_0 + sum_{m<=n} phi(k_m)^T [v_m, 1])        (Dv + 1 columns)
//   o_n = A_n[:Dv] / A_n[Dv]      (o_n = 0 where A_n[Dv] = 0)
// where S_0 is the state carried in (zero for a fresh sequence). As in retention, appending a
// constant 1 to every value makes the normaliser phi(q_n) . sum_m phi(k_m) the last column of the
// same product, so the state is one [F, Dv + 1] block per head: the key-value sums and, last
// column, the key sum. No positional decay, so no positions are needed.
//
// No eps in the denominator: it is a sum of products of nonnegative features, zero only when
// every product is (or underflowed to) zero, and then so is the numerator; such rows output 0 with
// gradient 0. (An eps of 1e-6, as fast-transformers uses, would dominate FAVOR+'s small features.)
//
// Forms: parallel (masked [T, T] scores per head; starts from an empty state and neither reads nor
// writes `state`), recurrent (one token at a time through the state) and chunkwise (the parallel
// form inside chunks of `chunk` tokens, the state across them: no [T, T] buffer; the last chunk may
// be short). Recurrent and chunkwise continue from `state` and leave the state after the last token.
//
// Two layers: the kernel over features (causal_linear_attention_*), shared by both mixers, and the
// mixers over queries and keys (linear_attention_*), which apply the feature map and then the
// kernel. Shapes: q, k: [B, T, H, Dk]; v, out: [B, T, H, Dv]; features: [B, T, H, F] (views with
// unit stride in the last dim, any other strides). state: per sequence b, H blocks of [F, Dv + 1]
// floats starting at state + b * state_stride. OpenMP over heads; scratch from the arena.
#include <cstdint>
#include <functional>
#include <string>

#include "retnet/core/arena.h"
#include "retnet/core/form.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/core/tensor.h"
#include "retnet/mixers/feature_maps.h"

namespace retnet {


inline int64_t linear_attention_state_floats_per_head(int64_t F, int64_t Dv) { return F * (Dv + 1); }

// ---- the kernel over features ------------------------------------------------------------------
struct CausalLinearArgs {
  TensorView phi_q, phi_k;  // [B, T, H, F], nonnegative
  TensorView v, out;        // [B, T, H, Dv]
  float* state = nullptr;   // required by recurrent and chunkwise
  int64_t state_stride = 0;
  // The row of the state each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
  int64_t chunk = 64;
  float* inv_denominators = nullptr;  // [B, T, H]: 1 / A_n[Dv] (0 where it is 0), for backward
};
size_t causal_linear_attention_workspace_floats(Form form, int64_t B, int64_t T,
                                                int64_t H, int64_t F, int64_t Dv, int64_t chunk);
void causal_linear_attention_forward(Form form, const CausalLinearArgs& args,
                                     Arena& arena);

// Backward of the parallel or chunkwise form from an empty state (training). Reads the forward's
// inputs, its output and inv_denominators; accumulates (+=) into d_phi_q, d_phi_k, d_v. The
// chunkwise backward sweeps the chunks forward (query gradients from the state) and backward (key
// and value gradients from the state's gradient): no [T, T] buffer.
struct CausalLinearGradArgs {
  TensorView phi_q, phi_k, v, out, d_out;
  TensorView d_phi_q, d_phi_k, d_v;
  const float* inv_denominators = nullptr;  // [B, T, H] from the forward
  int64_t chunk = 64;
  // Chunkwise only: the state the forward started from (the layout of CausalLinearArgs::state;
  // nullptr: empty) and where d loss / d start_state goes (same layout, overwritten; nullptr: not
  // wanted).
  const float* start_state = nullptr;
  float* d_start_state = nullptr;
  int64_t state_stride = 0;
};
size_t causal_linear_attention_backward_workspace_floats(Form form, int64_t B,
                                                         int64_t T, int64_t H, int64_t F,
                                                         int64_t Dv, int64_t chunk);
void causal_linear_attention_backward(Form form, const CausalLinearGradArgs& args,
                                      Arena& arena);

// ---- the mixers: feature map, then the kernel --------------------------------------------------
struct LinearAttentionArgs {
  TensorView q, k, v, out;  // q, k: [B, T, H, Dk]; v, out: [B, T, H, Dv]
  FeatureMap features;      // elu+1 (linear transformer) or FAVOR+ (Performer)
  float* state = nullptr;   // per sequence H blocks of [F, Dv + 1]; recurrent and chunkwise
  int64_t state_stride = 0;
  // The row of the state each sequence b is in (retnet/core/sequence_rows.h; nullptr: row b).
  const int64_t* rows = nullptr;
  int64_t chunk = 64;
  // What the backward pass needs, or nullptr (inference): the features [B, T, H, F] contiguous
  // and 1 / denominator [B, T, H]. Without them the features live in the arena.
  float* saved_phi_q = nullptr;
  float* saved_phi_k = nullptr;
  float* saved_inv_denominators = nullptr;
  // Sequence parallel (chunkwise): called once the features are known, with `state` holding what
  // these tokens add to an empty state (sum_m phi(k_m)^T [v_m, 1]); it replaces that by the state
  // entering them (retnet/model/slice_link.h). Empty: the state as given.
  std::function<void()> enter_slice;
};
size_t linear_attention_workspace_floats(Form form, const FeatureMap& features,
                                         int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv,
                                         int64_t chunk);
void linear_attention_forward(Form form, const LinearAttentionArgs& args,
                              Arena& arena);

// Backward of the parallel or chunkwise form from an empty state: accumulates (+=) into d_q, d_k
// ([B, T, H, Dk]) and d_v ([B, T, H, Dv]).
struct LinearAttentionGradArgs {
  TensorView q, k, v, out, d_out;
  TensorView d_q, d_k, d_v;
  FeatureMap features;
  const float* phi_q = nullptr;  // saved by the forward, [B, T, H, F] contiguous
  const float* phi_k = nullptr;
  const float* inv_denominators = nullptr;  // [B, T, H]
  int64_t chunk = 64;
  // Sequence parallel (chunkwise): the state the forward started from and its gradient, as in
  // CausalLinearGradArgs; leave_slice is then called with d_start_state holding this slice's
  // d loss / d start state and replaces it by d loss / d (the state the tokens leave), whose share
  // through each key and value is added to their gradients.
  const float* start_state = nullptr;
  float* d_start_state = nullptr;
  int64_t state_stride = 0;
  std::function<void()> leave_slice;
};
size_t linear_attention_backward_workspace_floats(Form form,
                                                  const FeatureMap& features, int64_t B,
                                                  int64_t T, int64_t H, int64_t Dk, int64_t Dv,
                                                  int64_t chunk);
void linear_attention_backward(Form form, const LinearAttentionGradArgs& args,
                               Arena& arena);

// Double-precision recurrence over the same definition, for tests: one head, contiguous q, k
// [T, Dk], v [T, Dv], from the state `state` [F, Dv + 1] (nullptr: empty) -> out [T, Dv]; the
// state after the last token goes to `end_state` (the same layout) if not null.
void linear_attention_reference(const FeatureMap& features, const float* q, const float* k,
                                const float* v, double* out, int64_t T, int64_t Dk, int64_t Dv,
                                const double* state = nullptr, double* end_state = nullptr);

}  // namespace retnet
