// The finiteness check of weights used where they lie (retnet/model/weight_ops.h): a packed or
// converted tensor is checked while it is read at load; one used in place is never read there, so
// its values are scanned the first time a forward pass uses it.
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/half.h"
#include "retnet/core/parallel.h"
#include "retnet/model/weight_ops.h"

namespace retnet {
namespace {

// An all-ones exponent is an infinity or a NaN in each of the three types.
inline bool non_finite(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  return (bits & 0x7f800000u) == 0x7f800000u;
}
inline bool non_finite(uint16_t w) { return (w & 0x7c00u) == 0x7c00u; }
inline bool non_finite(BFloat16 w) { return (w.bits & 0x7f80u) == 0x7f80u; }
inline float value_of(float w) { return w; }
inline float value_of(uint16_t w) { return half_to_float(w); }
inline float value_of(BFloat16 w) { return bf16_to_float(w.bits); }

// Index of the first non-finite value of w[0, n), or -1. Blocks in parallel, each a branch-free
// pass (vectorised) that looks for the index only when its block holds one.
template <typename W>
int64_t first_non_finite(const W* w, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<int64_t> found(static_cast<size_t>(blocks), -1);
  parallel_for_if(blocks > 1, blocks, [&](int64_t b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
    bool any = false;
    for (int64_t i = begin; i < end; ++i) any |= non_finite(w[i]);
    if (!any) return;
    for (int64_t i = begin; i < end; ++i)
      if (non_finite(w[i])) {
        found[static_cast<size_t>(b)] = i;
        return;
      }
  });
  for (int64_t i : found)
    if (i >= 0) return i;
  return -1;
}

template <typename W>
void check(const W* w, int64_t rows, int64_t K, const InPlaceRows& slice) {
  const int64_t i = first_non_finite(w, rows * K);
  RETNET_CHECK(i < 0,
               "tensor {} (used in place from the mapped model file) holds a non-finite value "
               "({}) at row {}, column {}: the model file is corrupt",
               slice.tensor, value_of(w[i < 0 ? 0 : i]), i / K, i % K);
}

}  // namespace

void check_finite_in_place(const Weight& w) {
  if (w.placement != Placement::InPlace) return;
  for (const InPlaceRows& part : w.parts) {
    auto scan = [&] {
      switch (w.type) {
        case ElementType::F32:
          return check(static_cast<const float*>(part.data), part.rows, w.K, part);
        case ElementType::F16:
          return check(static_cast<const uint16_t*>(part.data), part.rows, w.K, part);
        case ElementType::BF16:
          return check(static_cast<const BFloat16*>(part.data), part.rows, w.K, part);
        default:
          throw Error(fmt::format("weight '{}': {} weights cannot be used in place", w.name,
                                  element_type_name(w.type)));
      }
    };
    if (!part.scanned) {
      scan();
      continue;
    }
    // A scan that throws leaves the flag unset: every later use fails the same way.
    std::call_once(*part.scanned, scan);
  }
}

}  // namespace retnet
