// The comparison helpers must be able to fail: NaN or Inf in either array, a size mismatch or an
// error above the tolerance is a failure that names the element; equal finite arrays and
// differences within the tolerance pass. (std::max(x, NaN) returns x: a helper built on a plain
// running maximum passed all-NaN logits.)
#include <limits>
#include <string>
#include <vector>

#include "test_helpers.h"

using retnet::test::close;
using retnet::test::max_keep_nan;
using retnet::test::rel_max_error;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<float> kExpected = {1.0f, -2.0f, 0.5f, 4.0f};

// The failure of close(), or a test failure when it passed.
::testing::AssertionResult expect_failure(const ::testing::AssertionResult& r,
                                          const std::string& says) {
  if (r) return ::testing::AssertionFailure() << "close() passed; expected a failure";
  const std::string m = r.message();
  if (m.find(says) == std::string::npos)
    return ::testing::AssertionFailure() << "message lacks '" << says << "': " << m;
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(TestHelpers, ClosePassesOnEqualFiniteArrays) {
  EXPECT_TRUE(close(kExpected, kExpected, 0.0));
  EXPECT_EQ(rel_max_error(kExpected, kExpected), 0.0);
  const std::vector<double> as_double(kExpected.begin(), kExpected.end());
  EXPECT_TRUE(close(kExpected, as_double, 0.0));
  EXPECT_TRUE(close(std::vector<float>{}, std::vector<float>{}, 1e-5));
}

TEST(TestHelpers, ClosePassesWithinToleranceAndFailsAbove) {
  auto a = kExpected;
  a[2] += 3e-6f;  // 3e-6 / max|b| = 7.5e-7 relative
  EXPECT_TRUE(close(a, kExpected, 1e-6));
  EXPECT_DOUBLE_EQ(rel_max_error(a, kExpected), (double(a[2]) - 0.5) / 4);
  a[2] += 1e-3f;
  EXPECT_TRUE(expect_failure(close(a, kExpected, 1e-6), "[2]"));
  // All-zero expected: the error is absolute.
  const std::vector<float> zeros(3, 0.0f), small = {0.0f, 1e-7f, 0.0f};
  EXPECT_TRUE(close(small, zeros, 1e-6));
  EXPECT_FALSE(close(small, zeros, 1e-8));
}

TEST(TestHelpers, CloseFailsOnNaNInActual) {
  for (size_t i : {size_t{0}, size_t{3}}) {
    std::vector<double> a(kExpected.begin(), kExpected.end());
    a[i] = kNaN;
    EXPECT_TRUE(expect_failure(close(a, kExpected, 1e30), "actual[" + std::to_string(i) + "] = NaN"));
    EXPECT_EQ(rel_max_error(a, kExpected), kInf);
  }
  const std::vector<float> all_nan(4, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(expect_failure(close(all_nan, kExpected, 1e30), "4 of 4 elements"));
}

TEST(TestHelpers, CloseFailsOnNaNInExpected) {
  std::vector<double> b(kExpected.begin(), kExpected.end());
  b[1] = kNaN;
  EXPECT_TRUE(expect_failure(close(kExpected, b, 1e30), "expected[1] = NaN"));
  EXPECT_EQ(rel_max_error(kExpected, b), kInf);
  // NaN on both sides at the same place is still a failure (no "equal NaN").
  EXPECT_TRUE(expect_failure(close(b, b, 1e30), "actual[1] = NaN"));
}

TEST(TestHelpers, CloseFailsOnInfInEitherArray) {
  for (double inf : {kInf, -kInf}) {
    std::vector<double> x(kExpected.begin(), kExpected.end());
    x[2] = inf;
    const std::string v = inf > 0 ? "+inf" : "-inf";
    EXPECT_TRUE(expect_failure(close(x, kExpected, 1e30), "actual[2] = " + v));
    EXPECT_TRUE(expect_failure(close(kExpected, x, 1e30), "expected[2] = " + v));
    EXPECT_TRUE(expect_failure(close(x, x, 1e30), "actual[2] = " + v));
    EXPECT_EQ(rel_max_error(x, kExpected), kInf);
    EXPECT_EQ(rel_max_error(kExpected, x), kInf);
  }
  const std::vector<float> overflow = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(expect_failure(close(overflow, std::vector<float>{1.0f, 2.0f}, 1e30), "actual[1]"));
}

TEST(TestHelpers, CloseFailsOnSizeMismatch) {
  const std::vector<float> shorter(kExpected.begin(), kExpected.end() - 1);
  EXPECT_TRUE(expect_failure(close(shorter, kExpected, 1e30), "sizes differ: actual 3 vs expected 4"));
  EXPECT_TRUE(expect_failure(close(kExpected, shorter, 1e30), "sizes differ"));
  EXPECT_TRUE(expect_failure(close(std::vector<float>{}, kExpected, 1e30), "sizes differ"));
  EXPECT_EQ(rel_max_error(shorter, kExpected), kInf);
}

TEST(TestHelpers, RunningMaximumKeepsNaN) {
  // The failure mode being guarded against: std::max drops a NaN.
  EXPECT_EQ(std::max(0.5, kNaN), 0.5);
  EXPECT_TRUE(std::isnan(max_keep_nan(0.5, kNaN)));
  EXPECT_TRUE(std::isnan(max_keep_nan(kNaN, 0.5)));
  EXPECT_EQ(max_keep_nan(0.5, 0.25), 0.5);
  EXPECT_EQ(max_keep_nan(0.5, kInf), kInf);
  double worst = 0;
  for (double e : {1e-7, kNaN, 1e-8}) worst = max_keep_nan(worst, e);
  EXPECT_FALSE(worst <= 1e-5);
}
