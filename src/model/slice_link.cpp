// The per-layer bookkeeping of a SliceLink (retnet/model/slice_link.h); the scans are its
// subclasses' (a communicator's ranks, or slices run by hand in tests).
#include "retnet/model/slice_link.h"

#include <cstring>

#include "retnet/core/error.h"

namespace retnet {

void SliceLink::keep(int64_t layer, const float* state, size_t n) {
  RETNET_CHECK(layer >= 0, "slice link: layer {} is negative", layer);
  const size_t l = static_cast<size_t>(layer);
  if (entered_.size() <= l) entered_.resize(l + 1);
  entered_[l].assign(state, state + n);
}

void SliceLink::enter(int64_t layer, float* state, const float* decay, size_t n) {
  scan_earlier(state, decay, n);
  keep(layer, state, n);
}

void SliceLink::enter(int64_t layer, float* record, size_t n, const float* identity,
                      const Combine& combine) {
  fold_earlier(record, n, identity, combine);
  keep(layer, record, n);
}

const float* SliceLink::entered(int64_t layer, size_t n) const {
  RETNET_CHECK(layer >= 0 && static_cast<size_t>(layer) < entered_.size() &&
                   entered_[static_cast<size_t>(layer)].size() == n,
               "slice link: no incoming state of {} floats was kept for layer {} (the backward "
               "pass needs the forward's)",
               n, layer);
  return entered_[static_cast<size_t>(layer)].data();
}

void SliceLink::leave_gradient(int64_t, float* d_state, const float* decay, size_t n) {
  scan_later(d_state, decay, n);
}

void SliceLink::leave_gradient(int64_t, float* record, size_t n, const float* identity,
                               const Combine& combine) {
  fold_later(record, n, identity, combine);
}

}  // namespace retnet
