#include "retnet/ops/rotation.h"

#include <cmath>

namespace retnet {

std::vector<double> rotation_thetas(int64_t Dk) {
  int64_t half = Dk / 2;
  std::vector<double> t(half);
  for (int64_t i = 0; i < half; ++i)
    t[i] = half == 1 ? 1.0 : std::pow(10000.0, -static_cast<double>(i) / (half - 1));
  return t;
}

namespace {

// One row (all heads) at absolute position `pos`, with cos/sin of pos * theta_i given.
inline void rotate_row(float* row, int64_t H, int64_t Dk, const float* c, const float* s) {
  int64_t half = Dk / 2;
  for (int64_t h = 0; h < H; ++h) {
    float* x = row + h * Dk;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * c[i] - b * s[i];
      x[2 * i + 1] = b * c[i] + a * s[i];
    }
  }
}

// direction -1 gives the inverse rotation (sin negated).
inline void angles(int64_t pos, const std::vector<double>& thetas, float direction, float* c,
                   float* s) {
  // The angle is formed in double: pos * theta stays exact far beyond float's 2^24.
  for (size_t i = 0; i < thetas.size(); ++i) {
    double a = static_cast<double>(pos) * thetas[i];
    c[i] = static_cast<float>(std::cos(a));
    s[i] = direction * static_cast<float>(std::sin(a));
  }
}

}  // namespace

namespace {

void rotate(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
            const std::vector<double>& thetas, const int64_t* positions, float* cos_sin,
            float direction);

}  // namespace

void rotate_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                    const std::vector<double>& thetas, const int64_t* positions, float* cos_sin) {
  rotate(x, ld, B, T, H, Dk, thetas, positions, cos_sin, 1.f);
}

void rotate_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                     const std::vector<double>& thetas, const int64_t* positions, float* cos_sin) {
  rotate(dx, ld, B, T, H, Dk, thetas, positions, cos_sin, -1.f);
}

namespace {

void rotate(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
            const std::vector<double>& thetas, const int64_t* positions, float* cos_sin,
            float direction) {
  int64_t half = Dk / 2;
  bool shared = true;
  for (int64_t b = 1; positions && b < B; ++b) shared &= positions[b] == positions[0];
  if (shared && cos_sin) {
    int64_t p0 = positions ? positions[0] : 0;
    float* c = cos_sin;
    float* s = cos_sin + T * half;
#pragma omp parallel for schedule(static) if (T * half > 4096)
    for (int64_t t = 0; t < T; ++t) angles(p0 + t, thetas, direction, c + t * half, s + t * half);
#pragma omp parallel for collapse(2) schedule(static) if (B * T * H * Dk > 16384)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        rotate_row(x + (b * T + t) * ld, H, Dk, c + t * half, s + t * half);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static) if (B * T * H * Dk > 16384)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float c[512], s[512];  // Dk/2 <= 512 is checked by the config
      angles((positions ? positions[b] : 0) + t, thetas, direction, c, s);
      rotate_row(x + (b * T + t) * ld, H, Dk, c, s);
    }
}

}  // namespace

int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                       const int64_t* positions, float* table) {
  const int64_t half = static_cast<int64_t>(thetas.size());
  bool shared = true;
  for (int64_t b = 1; positions && b < B; ++b) shared &= positions[b] == positions[0];
  const int64_t sequences = shared ? 1 : B;
#pragma omp parallel for collapse(2) schedule(static) if (sequences * T * half > 4096)
  for (int64_t b = 0; b < sequences; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float* row = table + (b * T + t) * 2 * half;
      angles((positions ? positions[b] : 0) + t, thetas, 1.f, row, row + half);
    }
  return shared ? 0 : T;
}

void rotate_forward_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                          const float* table, int64_t sequence_stride) {
  const int64_t half = Dk / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * T * H * Dk > 16384)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = table + (b * sequence_stride + t) * 2 * half;
      rotate_row(x + (b * T + t) * ld, H, Dk, row, row + half);
    }
}

}  // namespace retnet
