// Backward passes of the ops: the float kernels against central finite differences of the op's
// definition evaluated in double precision.
#include <cmath>
#include <functional>

#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::random_vector;

namespace {

// d/dx sum(f(x) * dy) by central differences, f evaluated in double.
std::vector<double> fd_gradient(const std::function<std::vector<double>(const std::vector<double>&)>& f,
                                std::vector<double> x, const std::vector<float>& dy) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-6 * std::max(1.0, std::fabs(x[i])), x0 = x[i];
    x[i] = x0 + h;
    auto fp = f(x);
    x[i] = x0 - h;
    auto fm = f(x);
    x[i] = x0;
    double s = 0;
    for (size_t j = 0; j < fp.size(); ++j) s += (fp[j] - fm[j]) * dy[j];
    g[i] = s / (2 * h);
  }
  return g;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST(OpsBackward, RmsNorm) {
  const int64_t N = 4, D = 12;
  auto x = random_vector(N * D, 1, 2.0), w = random_vector(D, 2), dy = random_vector(N * D, 3);
  for (float eps : {0.f, 1e-3f})
    for (bool with_weight : {true, false}) {
      const float* wp = with_weight ? w.data() : nullptr;
      std::vector<float> y(N * D), rstd(N), dx(N * D, 0.f), dw(D, 0.f);
      rmsnorm_forward(x.data(), D, wp, y.data(), D, rstd.data(), N, D, eps);
      rmsnorm_backward(x.data(), D, wp, rstd.data(), dy.data(), D, dx.data(), D,
                       with_weight ? dw.data() : nullptr, N, D);
      auto f = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
        std::vector<double> out(N * D);
        for (int64_t n = 0; n < N; ++n) {
          double ss = 0;
          for (int64_t i = 0; i < D; ++i) ss += xs[n * D + i] * xs[n * D + i];
          double r = 1 / std::sqrt(ss / D + eps);
          for (int64_t i = 0; i < D; ++i) out[n * D + i] = xs[n * D + i] * r * (with_weight ? ws[i] : 1.0);
        }
        return out;
      };
      auto xd = as_double(x), wd = as_double(w);
      EXPECT_TRUE(close(dx, fd_gradient([&](const auto& v) { return f(v, wd); }, xd, dy), 1e-5));
      if (with_weight) {
        EXPECT_TRUE(close(dw, fd_gradient([&](const auto& v) { return f(xd, v); }, wd, dy), 1e-5));
      }
    }
}

TEST(OpsBackward, GatedActivations) {
  const int64_t N = 3, D = 40;
  auto a = random_vector(N * D, 4, 3.0), b = random_vector(N * D, 5), dy = random_vector(N * D, 6);
  for (Activation act : {Activation::Gelu, Activation::Swish}) {
    std::vector<float> da(N * D), db(N * D);
    gated_activation_backward(act, a.data(), D, b.data(), D, dy.data(), D, da.data(), D, db.data(), D, N, D);
    auto f = [&](const std::vector<double>& as, const std::vector<double>& bs) {
      std::vector<double> out(N * D);
      for (int64_t i = 0; i < N * D; ++i) {
        double x = as[i];
        double fx = act == Activation::Gelu ? 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))) : x / (1 + std::exp(-x));
        out[i] = fx * bs[i];
      }
      return out;
    };
    auto ad = as_double(a), bd = as_double(b);
    EXPECT_TRUE(close(da, fd_gradient([&](const auto& v) { return f(v, bd); }, ad, dy), 1e-5)) << activation_name(act);
    EXPECT_TRUE(close(db, fd_gradient([&](const auto& v) { return f(ad, v); }, bd, dy), 1e-5)) << activation_name(act);
  }
}

TEST(OpsBackward, RotationIsInvertedByItsBackward) {
  const int64_t B = 2, T = 6, H = 2, Dk = 8, ld = H * Dk;
  auto x = random_vector(B * T * ld, 7), dy = random_vector(B * T * ld, 8);
  auto thetas = rotation_thetas(Dk);
  std::vector<float> table(B * T * Dk);
  const int64_t positions[] = {3, 500};
  auto dx = dy;
  const int64_t stride = rotation_table(thetas, B, T, positions, table.data());
  rotate_with_table(dx.data(), ld, B, T, H, Dk, table.data(), stride, RotationDirection::Inverse);
  auto f = [&](const std::vector<double>& xs) {
    std::vector<double> out(xs.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < Dk / 2; ++i) {
            double a = double(positions[b] + t) * thetas[i];
            size_t o = (b * T + t) * ld + h * Dk + 2 * i;
            out[o] = xs[o] * std::cos(a) - xs[o + 1] * std::sin(a);
            out[o + 1] = xs[o + 1] * std::cos(a) + xs[o] * std::sin(a);
          }
    return out;
  };
  EXPECT_TRUE(close(dx, fd_gradient(f, as_double(x), dy), 1e-5));
}
