#pragma once
// Shared test utilities: seeded random data and a relative max error that names the worst element.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "retnet/core/rng.h"

namespace retnet::test {

inline std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0,
                                        uint64_t stream = 0) {
  Philox rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.normal(stream, i));
  return v;
}

// max|a - b| / max|b|: the tolerance measure of the project.
template <typename A, typename B>
double rel_max_error(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}

// gtest assertion helper printing the first mismatches.
template <typename A, typename B>
::testing::AssertionResult close(const A& a, const B& b, double tol) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  double err = rel_max_error(a, b);
  if (std::isfinite(err) && err <= tol) return ::testing::AssertionSuccess();
  double den = 0;
  for (size_t i = 0; i < b.size(); ++i) den = std::max(den, std::fabs(double(b[i])));
  auto f = ::testing::AssertionFailure();
  f << "relative max error " << err << " > " << tol << "; first mismatches:";
  int shown = 0;
  for (size_t i = 0; i < b.size() && shown < 5; ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= tol * den)) {
      f << " [" << i << "] " << a[i] << " vs " << b[i] << ";";
      ++shown;
    }
  }
  return f;
}

}  // namespace retnet::test
