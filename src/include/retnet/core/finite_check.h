#pragma once
// The check that turns a forward pass gone numerically wrong (weights that
// overflow float32) into an error naming where it happened, instead of NaN logits, a silent
// all-zero normalisation or garbage text downstream.
#include <cstdint>

namespace retnet {

// Where row r of a checked buffer lies: sequence n / T and position starts[n / T] + offset + n % T,
// with n = first_row + r (starts null: sequences start at position 0).
struct RowPlace {
  int64_t T = 1;
  const int64_t* starts = nullptr;
  int64_t offset = 0;
  int64_t first_row = 0;
};

// Largest magnitude a residual value may have so that the sum of squares of a row of `width`
// such values, which the next RMSNorm forms in float32, stays finite.
float largest_normable(int64_t width);

// Throws Error when a row of x [rows, cols] (row stride ld) holds a value that is not finite or
// exceeds `limit` in magnitude, naming `where`, the layer (< 0: none), the position and the
// sequence. One vectorised pass when all is well.
void check_finite_rows(const float* x, int64_t rows, int64_t cols, int64_t ld, const RowPlace& at,
                       const char* where, int64_t layer, float limit);

}  // namespace retnet
