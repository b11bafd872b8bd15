#pragma once
// Counter-based RNG (Philox4x32-10, Salmon et al. 2011): every random number is a pure function
// of (seed, stream, index), so results do not depend on the thread count or the order in which
// threads draw. Streams separate independent uses (one per parameter tensor, per data batch, ...).
#include <array>
#include <cstdint>

namespace retnet {

class Philox {
 public:
  explicit Philox(uint64_t seed) : seed_(seed) {}
  // Four independent 32-bit words for counter (stream, index).
  std::array<uint32_t, 4> block(uint64_t stream, uint64_t index) const;
  // Uniform in (0, 1): never 0, so log() is safe.
  double uniform(uint64_t stream, uint64_t index) const;
  // Standard normal (Box-Muller over one block).
  double normal(uint64_t stream, uint64_t index) const;

 private:
  uint64_t seed_;
};

}  // namespace retnet
