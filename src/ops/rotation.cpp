#include "retnet/ops/rotation.h"

#include <cmath>

#include "retnet/core/parallel.h"
#include "retnet/ops/ops_isa.h"

namespace retnet {

std::vector<double> rotation_thetas(int64_t Dk) {
  int64_t half = Dk / 2;
  std::vector<double> t(half);
  for (int64_t i = 0; i < half; ++i)
    t[i] = half == 1 ? 1.0 : std::pow(10000.0, -static_cast<double>(i) / (half - 1));
  return t;
}

std::vector<double> half_split_rotation_thetas(int64_t Dk, double base) {
  std::vector<double> t(static_cast<size_t>(Dk / 2));
  for (int64_t i = 0; i < Dk / 2; ++i)
    t[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(Dk));
  return t;
}


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
                       const float* table, int64_t sequence_stride, RotationDirection direction,
                       RotationPairs pairs) {
  static const auto kernel = RETNET_ISA_VARIANT(kernel_isa(), rotate_with_table);
  kernel(x, ld, B, T, H, Dk, table, sequence_stride, direction, pairs);
}

}  // namespace retnet
