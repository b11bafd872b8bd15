#include "retnet/core/arena.h"

#include <algorithm>
#include <cstdlib>

#include "retnet/core/error.h"

namespace retnet {

void Arena::reserve(size_t floats) {
  floats = footprint(floats);
  if (floats <= capacity_) return;
  void* p = std::aligned_alloc(64, std::max<size_t>(floats, 16) * sizeof(float));
  RETNET_CHECK(p != nullptr, "out of memory: activation arena of {} MiB",
               floats * sizeof(float) >> 20);
  block_ = std::unique_ptr<float, void (*)(void*)>(static_cast<float*>(p), std::free);
  capacity_ = floats;
  used_ = 0;
}

float* Arena::alloc(size_t n) {
  size_t need = footprint(n);
  RETNET_CHECK(used_ + need <= capacity_,
               "activation arena exhausted: {} floats in use, {} more requested, capacity {}",
               used_, need, capacity_);
  float* p = block_.get() + used_;
  used_ += need;
  high_water_ = std::max(high_water_, used_);
  return p;
}

}  // namespace retnet
