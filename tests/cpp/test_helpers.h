#pragma once
// Shared test utilities: seeded random data and a relative max error that names the worst element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "retnet/core/rng.h"
#include "retnet/model/config.h"

namespace retnet::test {

inline std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0,
                                        uint64_t stream = 0) {
  Philox rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.normal(stream, i));
  return v;
}

// A two-layer model small enough for finite differences and file round trips.
inline Config tiny_config() {
  Config c;
  c.embed_dim = 16;
  c.value_embed_dim = 24;
  c.heads = 2;
  c.ffn_dim = 20;
  c.layers = 2;
  c.vocab_size = 30;
  return c;
}

inline std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Rows of head h of sequence b of a contiguous [B, T, H, D] tensor, as a contiguous [T, D] block.
inline std::vector<float> head_rows(const std::vector<float>& x, int64_t T, int64_t H, int64_t D,
                                    int64_t b, int64_t h) {
  std::vector<float> r(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) r[t * D + i] = x[((b * T + t) * H + h) * D + i];
  return r;
}

// Central differences of loss() with respect to every entry of x (restored afterwards).
inline std::vector<double> finite_differences(const std::function<double()>& loss,
                                              std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
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
