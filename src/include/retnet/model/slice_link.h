#pragma once
// Sequence parallel training: each sequence of a batch is cut into contiguous slices, one per
// process, and a training pass runs over one slice. A constant-state mixer's state after a slice
// is an affine function of the state before it, state_out = decay * state_in + summary
// (elementwise: retention's per-head gamma^length, 1 for the linear mixers), so the state entering
// a slice is an exclusive scan over the slices before it of (summary, decay) pairs, and the
// gradient of the state leaving a slice is the same scan over the slices after it, in reverse,
// of (d loss / d state entering, decay) pairs. A mixer that keeps its state scaled by a running
// maximum (rwkv, aft-simple) passes records of its own instead, with its own associative combine.
//
// A SliceLink joins one slice to the others: the mixers call it once per layer in the forward
// pass and once per layer in the backward pass (every slice calls in the same order), and it keeps
// the incoming states for the backward pass.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace retnet {

class SliceLink {
 public:
  virtual ~SliceLink() = default;

  // Forward, layer `layer`: `state` holds this slice's summary (its state from an empty one) and
  // `decay` its decays, n floats each, for the pass's B sequences; on return `state` holds the
  // state entering the slice, which is also kept for entered().
  void enter(int64_t layer, float* state, const float* decay, size_t n);
  // The state enter() returned for `layer` (n floats).
  const float* entered(int64_t layer, size_t n) const;
  // Backward, layer `layer`: `d_state` holds d loss / d (state entering this slice) from this
  // slice's tokens; on return it holds d loss / d (state leaving this slice) from the later
  // slices' tokens.
  void leave_gradient(int64_t layer, float* d_state, const float* decay, size_t n);

  // The same for a mixer whose state is not a plain (state, decay) pair (a running-maximum-scaled
  // sum): each slice's record of n floats, combined by the mixer's associative rule
  // (combine(acc, x): acc <- acc (+) x, acc the earlier slices), with `identity` on the first
  // slice. enter() keeps the record it returns for entered(); leave_gradient() folds the later
  // slices' gradient records, the last first, with the same rule.
  using Combine = std::function<void(float* acc, const float* x)>;
  void enter(int64_t layer, float* record, size_t n, const float* identity,
             const Combine& combine);
  void leave_gradient(int64_t layer, float* record, size_t n, const float* identity,
                      const Combine& combine);

 protected:
  // state <- the exclusive scan over the earlier slices of (state, decay) pairs combined as
  // (s_a, d_a) (+) (s_b, d_b) = (d_b s_a + s_b, d_a d_b); zeros on the first slice.
  virtual void scan_earlier(float* state, const float* decay, size_t n) = 0;
  // The same over the later slices, nearest last: g <- sum over later slices j of
  // (the decays of the slices between) * g_j; zeros on the last slice.
  virtual void scan_later(float* d_state, const float* decay, size_t n) = 0;
  // record <- identity (+) x_0 (+) ... over the earlier slices in order, or over the later ones,
  // the last first.
  virtual void fold_earlier(float* record, size_t n, const float* identity,
                            const Combine& combine) = 0;
  virtual void fold_later(float* record, size_t n, const float* identity,
                          const Combine& combine) = 0;

 private:
  void keep(int64_t layer, const float* state, size_t n);
  std::vector<std::vector<float>> entered_;  // per layer
};

}  // namespace retnet
