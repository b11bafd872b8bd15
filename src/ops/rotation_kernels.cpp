// Rotating rows by a table of cosines and sines (rotation.h), compiled once per
// instruction-set level (retnet/core/isa_kernels.h); rotation.cpp picks one.
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "retnet/core/parallel.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

// One row (all heads): each pair rotated by the angle whose cos/sin are c[i]/s[i]; the inverse
// rotation negates the sine.
// Pair i is (x[i * step], x[i * step + offset]): neighbours (step 2, offset 1) or halves (step 1,
// offset Dk/2).
template <bool inverse>
inline void rotate_row(float* row, int64_t H, int64_t Dk, const float* c, const float* s,
                       int64_t step, int64_t offset) {
  int64_t half = Dk / 2;
  for (int64_t h = 0; h < H; ++h) {
    float* x = row + h * Dk;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      float a = x[step * i], b = x[step * i + offset], si = inverse ? -s[i] : s[i];
      x[step * i] = a * c[i] - b * si;
      x[step * i + offset] = b * c[i] + a * si;
    }
  }
}

template <bool inverse>
void rotate_rows(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                 const float* table, int64_t sequence_stride, RotationPairs pairs) {
  const int64_t half = Dk / 2;
  const bool interleaved = pairs == RotationPairs::Interleaved;
  const int64_t step = interleaved ? 2 : 1, offset = interleaved ? 1 : half;
  parallel_for_if(B * T * H * Dk > 16384, B * T, [&](int64_t r) {
    const int64_t b = r / T, t = r % T;
    const float* row = table + (b * sequence_stride + t) * 2 * half;
    if (interleaved)  // constants, so the common case keeps its vectorised loop
      rotate_row<inverse>(x + r * ld, H, Dk, row, row + half, 2, 1);
    else
      rotate_row<inverse>(x + r * ld, H, Dk, row, row + half, step, offset);
  });
}

}  // namespace

void rotate_with_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                       const float* table, int64_t sequence_stride, RotationDirection direction,
                       RotationPairs pairs) {
  if (direction == RotationDirection::Forward)
    rotate_rows<false>(x, ld, B, T, H, Dk, table, sequence_stride, pairs);
  else
    rotate_rows<true>(x, ld, B, T, H, Dk, table, sequence_stride, pairs);
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
