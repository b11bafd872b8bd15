// The finiteness check of weights used where they lie (retnet/model/model.h): a packed or
// converted tensor is checked while it is read at load; one used in place is never read there, so
// its values are scanned the first time a forward pass uses it.
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/half.h"
#include "retnet/core/parallel.h"
#include "retnet/model/model.h"

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
void check(const W* w, int64_t rows, int64_t K, const RowMajorSlice& slice) {
  const int64_t i = first_non_finite(w, rows * K);
  RETNET_CHECK(i < 0,
               "tensor {} (used in place from the mapped model file) holds a non-finite value "
               "({}) at row {}, column {}: the model file is corrupt",
               slice.tensor, value_of(w[i < 0 ? 0 : i]), i / K, i % K);
}

}  // namespace

void check_finite_in_place(const RowMajorSlice& slice, int64_t K) {
  auto scan = [&] {
    if (slice.f32)
      check(slice.f32, slice.rows, K, slice);
    else if (slice.f16)
      check(slice.f16, slice.rows, K, slice);
    else if (slice.bf16)
      check(slice.bf16, slice.rows, K, slice);
  };
  if (!slice.scanned) return scan();
  // A scan that throws leaves the flag unset: every later use fails the same way.
  std::call_once(*slice.scanned, scan);
}

}  // namespace retnet
