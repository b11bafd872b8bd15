#include "retnet/ops/rotation.h"

#include <cmath>

#include "retnet/core/parallel.h"

namespace retnet {

std::vector<double> rotation_thetas(int64_t Dk) {
  int64_t half = Dk / 2;
  std::vector<double> t(half);
  for (int64_t i = 0; i < half; ++i)
    t[i] = half == 1 ? 1.0 : std::pow(10000.0, -static_cast<double>(i) / (half - 1));
  return t;
}

namespace {

// One row (all heads): each pair rotated by the angle whose cos/sin are c[i]/s[i]; the inverse
// rotation negates the sine.
template <bool inverse>
inline void rotate_row(float* row, int64_t H, int64_t Dk, const float* c, const float* s) {
  int64_t half = Dk / 2;
  for (int64_t h = 0; h < H; ++h) {
    float* x = row + h * Dk;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      float a = x[2 * i], b = x[2 * i + 1], si = inverse ? -s[i] : s[i];
      x[2 * i] = a * c[i] - b * si;
      x[2 * i + 1] = b * c[i] + a * si;
    }
  }
}

template <bool inverse>
void rotate_rows(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                 const float* table, int64_t sequence_stride) {
  const int64_t half = Dk / 2;
  parallel_for_if(B * T * H * Dk > 16384, B * T, [&](int64_t r) {
    const int64_t b = r / T, t = r % T;
    const float* row = table + (b * sequence_stride + t) * 2 * half;
    rotate_row<inverse>(x + r * ld, H, Dk, row, row + half);
  });
}

}  // namespace

int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                       const int64_t* positions, float* table) {
  const int64_t half = static_cast<int64_t>(thetas.size());
  bool shared = true;
  for (int64_t b = 1; positions && b < B; ++b) shared &= positions[b] == positions[0];
  const int64_t sequences = shared ? 1 : B;
  parallel_for_if(sequences * T * half > 4096, sequences * T, [&](int64_t r) {
    const int64_t b = r / T, t = r % T;
    float* row = table + r * 2 * half;
    // The angle is formed in double: pos * theta stays exact far beyond float's 2^24.
    const double pos = static_cast<double>((positions ? positions[b] : 0) + t);
    for (int64_t i = 0; i < half; ++i) {
      row[i] = static_cast<float>(std::cos(pos * thetas[i]));
      row[half + i] = static_cast<float>(std::sin(pos * thetas[i]));
    }
  });
  return shared ? 0 : T;
}

void rotate_with_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                       const float* table, int64_t sequence_stride, RotationDirection direction) {
  if (direction == RotationDirection::Forward)
    rotate_rows<false>(x, ld, B, T, H, Dk, table, sequence_stride);
  else
    rotate_rows<true>(x, ld, B, T, H, Dk, table, sequence_stride);
}

}  // namespace retnet
