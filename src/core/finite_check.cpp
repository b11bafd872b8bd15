#include "retnet/core/finite_check.h"

#include <cfloat>
#include <cmath>
#include <string>

#include "retnet/core/error.h"

namespace retnet {

float largest_normable(int64_t width) {
  return static_cast<float>(std::sqrt(static_cast<double>(FLT_MAX) / static_cast<double>(width)));
}

void check_finite_rows(const float* x, int64_t rows, int64_t cols, int64_t ld, const RowPlace& at,
                       const char* where, int64_t layer, float limit) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
    // Branch-free, so it vectorises; NaN fails the comparison. The search for the offending
    // value runs only when there is one.
    bool ok = true;
#pragma omp simd reduction(&& : ok)
    for (int64_t i = 0; i < cols; ++i) ok = ok && std::fabs(row[i]) <= limit;
    if (ok) continue;
    int64_t i = 0;
    while (std::fabs(row[i]) <= limit) ++i;
    const int64_t n = at.first_row + r, sequence = n / at.T;
    const int64_t position = (at.starts ? at.starts[sequence] : 0) + at.offset + n % at.T;
    const std::string place =
        fmt::format("{}{} at position {} of sequence {}", where,
                    layer >= 0 ? fmt::format(" of layer {}", layer) : "", position, sequence);
    if (std::isfinite(row[i]))
      throw Error(
          fmt::format("value {} in {} exceeds {}: the model's weights overflow float32 "
                      "in the next normalisation",
                      row[i], place, limit));
    throw Error(
        fmt::format("non-finite value in {} (value {}): the model's weights overflow "
                    "float32",
                    place, row[i]));
  }
}

}  // namespace retnet
