// Every op against a naive double-precision reference.
#include <algorithm>
#include <cmath>
#include <vector>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/fast_exp.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::random_vector;

namespace {

// Largest |f(x) - exp(x)| / exp(x) over x = lo, lo + step, ... <= hi, against exp in double.
template <typename F>
double max_exp_rel_error(F f, double lo, double hi, double step) {
  double worst = 0;
  for (double x = lo; x <= hi; x += step) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    worst = retnet::test::max_keep_nan(worst, std::fabs(static_cast<double>(f(xf)) - want) / want);
  }
  return worst;
}

}  // namespace

// 2 ulp of float is 2.4e-7 relative at worst.
TEST(FastExp, WithinTwoUlpOverItsRange) {
  EXPECT_LE(max_exp_rel_error([](float x) { return fast_exp(x); }, -87, 88, 1e-4), 2.4e-7);
  EXPECT_LE(max_exp_rel_error([](float x) { return fast_exp_nonpositive(x); }, -87, 0, 1e-4),
            2.4e-7);
  EXPECT_EQ(fast_exp(0.f), 1.f);
  EXPECT_EQ(fast_exp_nonpositive(0.f), 1.f);
#if defined(__AVX512F__)
  auto lanes = [](float x) {
    // Every lane holds x, and every lane must give the same result.
    alignas(64) float out[16];
    _mm512_store_ps(out, fast_exp_nonpositive16(_mm512_set1_ps(x)));
    for (float o : out) EXPECT_EQ(o, out[0]);
    return out[0];
  };
  EXPECT_LE(max_exp_rel_error(lanes, -87, 0, 1e-3), 2.4e-7);
#endif
}

TEST(FastExp, ZeroBelowMinus87) {
  for (float x : {-87.01f, -88.f, -100.f, -1e30f, -INFINITY}) {
    EXPECT_EQ(fast_exp(x), 0.f) << x;
    EXPECT_EQ(fast_exp_nonpositive(x), 0.f) << x;
#if defined(__AVX512F__)
    alignas(64) float out[16];
    _mm512_store_ps(out, fast_exp_nonpositive16(_mm512_set1_ps(x)));
    for (float o : out) EXPECT_EQ(o, 0.f) << x;
#endif
  }
  // In an `omp simd` loop (the way the mixers call them), the same.
  std::vector<float> x(64), y(64), z(64);
  for (int i = 0; i < 64; ++i) x[i] = -80.f - 0.25f * i;
#pragma omp simd
  for (int i = 0; i < 64; ++i) {
    y[i] = fast_exp(x[i]);
    z[i] = fast_exp_nonpositive(x[i]);
  }
  for (int i = 0; i < 64; ++i) {
    if (x[i] < -87.f) {
      EXPECT_EQ(y[i], 0.f) << x[i];
      EXPECT_EQ(z[i], 0.f) << x[i];
    } else {
      EXPECT_NEAR(y[i], std::exp(double(x[i])), 2.4e-7 * std::exp(double(x[i]))) << x[i];
      EXPECT_EQ(y[i], z[i]) << x[i];
    }
  }
}

// A NaN argument (a diverging run) gives NaN, with no float-to-integer conversion on the way
// (UBSan checks that in the sanitizer build); infinities keep their limits.
TEST(FastExp, NaNGivesNaN) {
  std::vector<float> x = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, 0.f}, y(5), z(5);
#pragma omp simd
  for (int i = 0; i < 5; ++i) {
    y[i] = fast_exp(x[i]);
    z[i] = fast_exp_nonpositive(x[i]);
  }
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]) && std::isnan(z[0]) && std::isnan(z[1]));
  EXPECT_EQ(y[2], fast_exp(88.f));
  EXPECT_EQ(y[3], 0.f);
  EXPECT_EQ(z[3], 0.f);
  EXPECT_EQ(y[4], 1.f);
  EXPECT_EQ(z[4], 1.f);
}

TEST(Gemm, AllTransposesMatchReference) {
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 7, 5}, {17, 33, 9}, {64, 48, 130}, {3, 1, 4}}) {
    for (Trans ta : {Trans::No, Trans::Yes})
      for (Trans tb : {Trans::No, Trans::Yes}) {
        auto A = random_vector(M * K, 1), B = random_vector(K * N, 2);
        auto C = random_vector(M * N, 3), R = C;
        int64_t lda = ta == Trans::No ? K : M, ldb = tb == Trans::No ? N : K;
        sgemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
        sgemm_reference(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, R.data(), N);
        EXPECT_TRUE(close(C, R, 1e-5)) << M << "x" << N << "x" << K;
      }
  }
}

TEST(Gemm, BetaZeroOverwritesNaN) {
  std::vector<float> A(8, 1.f), B(8, 1.f), C(4, NAN);
  sgemm(Trans::No, Trans::Yes, 1, 4, 2, 1.f, A.data(), 2, B.data(), 2, 0.f, C.data(), 4);
  for (float c : C) EXPECT_EQ(c, 2.f);
}

TEST(Gemm, SkinnyMatchesReferenceAndIsBatchInvariant) {
  // Shapes with K tails (not a multiple of 16), N tails (not a multiple of 4), strided operands.
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 7, 5}, {3, 33, 130}, {5, 1536, 256},
                         {64, 13, 17}, {9, 256, 512}}) {
    const int64_t lda = K + 3, ldb = K + 1, ldc = N + 2;
    auto A = random_vector(M * lda, 4), B = random_vector(N * ldb, 5);
    for (float beta : {0.f, 1.f}) {
      auto C = random_vector(M * ldc, 6), R = C;
      skinny_gemm_nt(M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
      sgemm_reference(Trans::No, Trans::Yes, M, N, K, 1.f, A.data(), lda, B.data(), ldb, beta,
                      R.data(), ldc);
      EXPECT_TRUE(close(C, R, 1e-5)) << M << "x" << N << "x" << K << " beta " << beta;
      // Row m of a batched product equals, bit for bit, the product of row m alone.
      for (int64_t m = 0; m < M; ++m) {
        std::vector<float> one(N + 2);
        std::copy(R.begin() + m * ldc, R.begin() + m * ldc + N, one.begin());  // beta's input
        auto input = random_vector(M * ldc, 6);
        std::copy(input.begin() + m * ldc, input.begin() + m * ldc + N, one.begin());
        skinny_gemm_nt(1, N, K, A.data() + m * lda, lda, B.data(), ldb, beta, one.data(), ldc);
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(one[n], C[m * ldc + n]) << "row " << m << " col " << n << " of " << M;
      }
    }
  }
}

TEST(Gemm, PackedMatchesReferenceAndIsBatchInvariant) {
  // float32 and f16 panels; N and K tails; strided A and C; beta 0 and 1.
  // Row counts that take each pass shape: 6-row passes, and 4, 5, 5 + 5 (16, 64) rows left over;
  // 2, 3 and 4 rows in half-panel tiles, with a short last group and a half past N; one to three
  // rows left after sixes (7, 8, 9, 13).
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 7, 5}, {4, 1536, 256}, {11, 33, 130},
                         {64, 70, 64}, {6, 256, 512}, {16, 100, 48}, {2, 200, 40}, {3, 72, 33},
                         {4, 100, 17}, {2, 9, 300}, {7, 50, 20}, {8, 120, 64}, {9, 1536, 64},
                         {13, 33, 130}}) {
    const int64_t lda = K + 2, ldc = N + 3;
    auto A = random_vector(M * lda, 7), B = random_vector(N * K, 8);
    std::vector<uint16_t> half(packed_weight_elements(N, K));
    std::vector<float> packed(packed_weight_elements(N, K)), rounded(B.size());
    pack_weights(B.data(), N, K, K, packed.data());
    pack_weights_f16(B.data(), N, K, K, half.data());
    for (size_t i = 0; i < B.size(); ++i) {
      rounded[i] = half_to_float(float_to_half(B[i]));
      ASSERT_LE(std::fabs(rounded[i] - B[i]), std::fabs(B[i]) * (1.0 / 2048) + 6e-8) << B[i];
    }
    for (bool f16 : {false, true})
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " f16 " << f16
                                          << " beta " << beta);
        auto C = random_vector(M * ldc, 9), R = C, input = C;
        auto run = [&, N = N, K = K](int64_t rows, const float* a, float* c) {
          if (f16) packed_gemm_nt_f16(rows, N, K, a, lda, half.data(), beta, c, ldc);
          else packed_gemm_nt(rows, N, K, a, lda, packed.data(), beta, c, ldc);
        };
        run(M, A.data(), C.data());
        sgemm_reference(Trans::No, Trans::Yes, M, N, K, 1.f, A.data(), lda,
                        f16 ? rounded.data() : B.data(), K, beta, R.data(), ldc);
        EXPECT_TRUE(close(C, R, 1e-5));
        // Columns past N are left alone; each row alone equals its row of the batch, bit for bit.
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], input[m * ldc + n]);
          std::vector<float> one(input.begin() + m * ldc, input.begin() + (m + 1) * ldc);
          run(1, A.data() + m * lda, one.data());
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(one[n], C[m * ldc + n]) << "row " << m << " column " << n;
        }
      }
  }
}

TEST(Gemm, LoadsAnOptimisedCore) {
  const BlasInfo& info = blas_info();
  EXPECT_FALSE(info.library.empty());
  // The reason the engine loads BLAS itself: never the generic SSE3 fallback on an AVX2+ CPU,
  // unless RETNET_MAX_ISA=scalar asks for it.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && !info.corename.empty()) {
    if (isa_allowed(Isa::Avx2)) {
      EXPECT_NE(info.corename, "Prescott") << info.config;
      EXPECT_NE(info.corename, "Core2") << info.config;
    } else {
      EXPECT_EQ(info.corename, "Prescott") << info.config;
    }
  }
}

TEST(RmsNorm, MatchesReferenceWithAndWithoutWeight) {
  const int64_t N = 5, D = 48;
  auto x = random_vector(N * D, 4, 3.0), w = random_vector(D, 5);
  for (float eps : {0.f, 1e-6f, 0.1f})
    for (const float* wp : {(const float*)w.data(), (const float*)nullptr}) {
      std::vector<float> y(N * D), rstd(N);
      rmsnorm_forward(x.data(), D, wp, y.data(), D, rstd.data(), N, D, eps);
      std::vector<double> ref(N * D);
      for (int64_t n = 0; n < N; ++n) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += double(x[n * D + i]) * x[n * D + i];
        double r = 1.0 / std::sqrt(ss / D + eps);
        EXPECT_NEAR(rstd[n], r, 1e-6 * r);
        for (int64_t i = 0; i < D; ++i) ref[n * D + i] = x[n * D + i] * r * (wp ? wp[i] : 1.0);
      }
      EXPECT_TRUE(close(y, ref, 1e-6));
    }
}

TEST(Activation, GeluAndSwishMatchReference) {
  auto a = random_vector(300, 6, 4.0), b = random_vector(300, 7);
  for (Activation act : {Activation::Gelu, Activation::Swish}) {
    std::vector<float> out(300);
    gated_activation_forward(act, a.data(), 100, b.data(), 100, out.data(), 100, 3, 100);
    std::vector<double> ref(300);
    for (int i = 0; i < 300; ++i) {
      double x = a[i];
      double f = act == Activation::Gelu ? 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))
                                         : x / (1 + std::exp(-x));
      ref[i] = f * b[i];
    }
    EXPECT_TRUE(close(out, ref, 1e-6)) << activation_name(act);
  }
  EXPECT_EQ(parse_activation("silu"), Activation::Swish);
  EXPECT_THROW(parse_activation("relu"), Error);
}

// gelu goes through a vectorisable erfc (Numerical Recipes' erfcc and fast_exp): its relative
// error against double-precision erfc stays within a few float ulps over the whole range,
// including the negative tail where 1 + erf(u) is tiny.
TEST(Activation, GeluErfWithinFloatPrecision) {
  double worst = 0, worst_gelu = 0, worst_grad = 0;
  for (double x = -12; x <= 12; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const double u = static_cast<double>(xf) / std::sqrt(2.0);
    const double ope = std::erfc(-u);
    worst = retnet::test::max_keep_nan(worst, std::abs(one_plus_erf(static_cast<float>(u)) - ope) / ope);
    const double g = 0.5 * xf * ope;  // relative to |x|: gelu's tail is tiny, not its error
    worst_gelu = retnet::test::max_keep_nan(worst_gelu, std::abs(gelu(xf) - g) / std::abs(xf));
    const double grad = 0.5 * ope + xf * std::exp(-0.5 * xf * xf) / std::sqrt(2 * M_PI);
    worst_grad = retnet::test::max_keep_nan(worst_grad, std::abs(gelu_grad(xf) - grad));  // |grad| <= 1.13
  }
  EXPECT_LE(worst, 1e-5);  // 8e-6 in the far tail (1 + erf below 1e-30), 2 ulp elsewhere
  EXPECT_LE(worst_gelu, 2e-7);
  // 2 ulp of values up to 1.13 (inline: the including file's optimisation level moves it by one)
  EXPECT_LE(worst_grad, 2.5e-7);
  EXPECT_EQ(gelu(0.f), 0.f);
}

TEST(Rotation, ThetaGridIsTorchscales) {
  auto t = rotation_thetas(8);  // linspace(0, 1, 4) exponents
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0], 1.0);
  EXPECT_NEAR(t[1], std::pow(10000.0, -1.0 / 3), 1e-15);
  EXPECT_NEAR(t[3], 1e-4, 1e-18);
  EXPECT_EQ(rotation_thetas(2), std::vector<double>{1.0});
}

TEST(Rotation, RotatesInterleavedPairsByPositionTimesTheta) {
  const int64_t B = 2, T = 5, H = 3, Dk = 8, ld = H * Dk + 4;
  auto x = random_vector(B * T * ld, 8);
  auto y = x;
  std::vector<float> table(B * T * Dk);
  const int64_t positions[] = {0, 100000};
  auto thetas = rotation_thetas(Dk);
  for (const int64_t* pos : {(const int64_t*)nullptr, positions}) {
    y = x;
    const int64_t stride = rotation_table(thetas, B, T, pos, table.data());
    EXPECT_EQ(stride, pos ? T : 0);  // a table per sequence only when their positions differ
    rotate_with_table(y.data(), ld, B, T, H, Dk, table.data(), stride, RotationDirection::Forward);
    std::vector<double> ref(y.begin(), y.end());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < Dk / 2; ++i) {
            double n = double((pos ? pos[b] : 0) + t), a = n * thetas[i];
            size_t o = (b * T + t) * ld + h * Dk + 2 * i;
            ref[o] = x[o] * std::cos(a) - x[o + 1] * std::sin(a);
            ref[o + 1] = x[o + 1] * std::cos(a) + x[o] * std::sin(a);
          }
    EXPECT_TRUE(close(y, ref, 1e-6));
  }
}
