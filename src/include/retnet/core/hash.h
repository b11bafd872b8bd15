#pragma once
// FNV-1a, 64-bit: checksums of checkpoints and state files, and model fingerprints. Not
// cryptographic; it detects damage and mix-ups, not tampering.
#include <cstddef>
#include <cstdint>

namespace retnet {

inline constexpr uint64_t kFnv1aBasis = 1469598103934665603ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace retnet
