// Block-quantised weights (Q8_0, Q4_0, Q4_1): the round trip within each format's error bound,
// ggml's byte layout, bad input, and the products: every ISA path against the scalar one and the
// scalar one against the naive reference (within the bound of quantising the activations to
// int8), batch invariance, the prefill path, NaN propagation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/quant.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::random_vector;

namespace {

constexpr QuantType kTypes[] = {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1};

// Weights whose blocks have very different magnitudes (as real layers do) and an offset.
std::vector<float> weights(int64_t N, int64_t K, uint64_t seed) {
  std::vector<float> w = random_vector(static_cast<size_t>(N * K), seed);
  for (int64_t i = 0; i < N * K; ++i) w[i] = w[i] * std::exp2f(float((i / 32) % 7) - 3) + 0.01f;
  return w;
}

std::vector<uint8_t> quantised(QuantType type, const std::vector<float>& w, int64_t N, int64_t K) {
  std::vector<uint8_t> q(N * quant_row_bytes(type, K));
  quantize_rows(type, w.data(), N, K, K, q.data());
  return q;
}

// ggml rows repacked into the decode panels the products take.
std::vector<uint8_t> panels(QuantType type, const std::vector<uint8_t>& q, int64_t N, int64_t K) {
  std::vector<uint8_t> p(quant_panel_bytes(type, N, K));
  pack_quant_panels(type, q.data(), N, K, p.data());
  return p;
}

}  // namespace

TEST(QuantBlocks, RoundTripStaysWithinEachFormatsBound) {
  const int64_t N = 7, K = 256;
  const auto w = weights(N, K, 1);
  for (QuantType type : kTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const auto q = quantised(type, w, N, K);
    EXPECT_EQ(q.size() * 8, static_cast<size_t>(N * K * quant_bits_per_weight(type)));
    std::vector<float> back(N * K);
    dequantize_rows(type, q.data(), N, K, back.data(), K);
    for (int64_t b = 0; b < N * K / 32; ++b) {
      const float* x = w.data() + b * 32;
      float lo = x[0], hi = x[0], amax = 0;
      for (int i = 0; i < 32; ++i)
        lo = std::min(lo, x[i]), hi = std::max(hi, x[i]), amax = std::max(amax, std::fabs(x[i]));
      // Half a step, plus the f16 rounding of the scale (and minimum) times the largest level;
      // Q4_0's step is amax / 8 and its far side clamps at +7 steps: one whole step.
      double bound;
      if (type == QuantType::Q8_0)
        bound = amax / 127 * (0.5 + 127 * 0x1p-11);
      else if (type == QuantType::Q4_0)
        bound = amax / 8 * (1.0 + 8 * 0x1p-11);
      else
        bound = (hi - lo) / 15 * (0.5 + 15 * 0x1p-11) + std::fabs(lo) * 0x1p-11;
      for (int i = 0; i < 32; ++i)
        ASSERT_LE(std::fabs(back[b * 32 + i] - x[i]), bound * 1.001 + 1e-12)
            << "block " << b << " value " << i;
    }
  }
}

TEST(QuantBlocks, LayoutIsGgmls) {
  // Values 0, 0, 1, 1, ..., 15, 15: Q4_1 stores d = 1, m = 0 and nibbles equal to the values,
  // byte j holding value j (low nibble) and value j + 16 (high nibble).
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i / 2);
  uint8_t q[20];
  quantize_rows(QuantType::Q4_1, x, 1, 32, 32, q);
  uint16_t d, m;
  std::memcpy(&d, q, 2);
  std::memcpy(&m, q + 2, 2);
  EXPECT_EQ(d, float_to_half(1.f));
  EXPECT_EQ(m, float_to_half(0.f));
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q[4 + j], (j / 2) | ((j + 16) / 2) << 4) << j;
  // Q8_0 of -127..127 in steps of 8 times 0.5: scale 0.5, the integers themselves.
  for (int i = 0; i < 32; ++i) x[i] = 0.5f * float(i * 8 - 127 + (i == 31 ? 6 : 0));
  uint8_t q8[34];
  quantize_rows(QuantType::Q8_0, x, 1, 32, 32, q8);
  std::memcpy(&d, q8, 2);
  EXPECT_EQ(half_to_float(d), 0.5f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(int8_t(q8[2 + i]), int(x[i] * 2)) << i;
  // Q4_0: the largest magnitude (-4) maps to level 0 (value -8 d), d = 0.5.
  for (int i = 0; i < 32; ++i) x[i] = 0.5f * float(i % 16 - 8);
  uint8_t q4[18];
  quantize_rows(QuantType::Q4_0, x, 1, 32, 32, q4);
  std::memcpy(&d, q4, 2);
  EXPECT_EQ(half_to_float(d), 0.5f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q4[2 + j], j | j << 4) << j;
}

TEST(QuantBlocks, PanelsHoldTheRowsBytesAndGiveThemBack) {
  // N = 13: one group, padded; K = 96: 3 blocks. Unpacking returns the ggml rows
  // byte for byte, and the panels take the padded rows' bytes exactly.
  const int64_t N = 13, K = 96;
  for (QuantType type : kTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const auto q = quantised(type, weights(N, K, 12), N, K);
    const auto p = panels(type, q, N, K);
    EXPECT_EQ(p.size(), 16 * quant_row_bytes(type, K));
    std::vector<uint8_t> back(q.size());
    unpack_quant_panels(type, p.data(), K, 0, N, back.data());
    EXPECT_EQ(back, q);
    std::vector<float> want(K), got(K);
    dequantize_rows(type, q.data() + 11 * quant_row_bytes(type, K), 1, K, want.data(), K);
    dequantize_panel_rows(type, p.data(), K, 11, 1, got.data(), K);
    EXPECT_EQ(got, want);
  }
  // Q8_0's word j holds bytes 4j..4j+3 of each row in turn: row 1's value 5 is byte 64 + 4 + 1.
  std::vector<float> w(2 * 32, 0.f);
  w[32 + 5] = 1.f;  // row 1, value 5: quantised to 127
  const auto p = panels(QuantType::Q8_0, quantised(QuantType::Q8_0, w, 2, 32), 2, 32);
  EXPECT_EQ(int8_t(p[64 + 4 + 1]), 127);
  uint16_t d;
  std::memcpy(&d, p.data() + 512 + 2, 2);  // the scales after the quants: row 1's d
  EXPECT_EQ(d, float_to_half(1.f / 127.f));
}

TEST(QuantBlocks, BadInputIsAClearError) {
  std::vector<float> w(48, 1.f);
  std::vector<uint8_t> q(1000);
  EXPECT_TRUE(test::throws_error_naming(
      [&] { quantize_rows(QuantType::Q8_0, w.data(), 1, 48, 48, q.data(), "layers.0.fc2.weight"); },
      {"layers.0.fc2.weight", "48", "multiple of 32"}));
  w[5] = std::nanf("");
  EXPECT_TRUE(test::throws_error_naming(
      [&] { quantize_rows(QuantType::Q4_0, w.data(), 1, 32, 32, q.data(), "embed"); },
      {"embed", "not finite"}));
  EXPECT_TRUE(test::throws_error_naming([&] { parse_quant_type("q5_k", "--type"); },
                                        {"--type", "q5_k", "q8_0"}));
  EXPECT_EQ(parse_quant_type("q4_1", "--type"), QuantType::Q4_1);
}

namespace {

// The scalar product against the naive one: their difference is the activations' rounding to
// int8, at most half a step (max |a| / 127 / 2) per value, times the weights it meets.
void expect_scalar_within_activation_rounding(QuantType type, int64_t M, int64_t N, int64_t K,
                                              const std::vector<float>& A,
                                              const std::vector<uint8_t>& q) {
  std::vector<float> got(M * N), want(M * N), w(N * K);
  quant_gemm_nt_with(QuantKernel::Scalar, type, M, N, K, A.data(), K, panels(type, q, N, K).data(),
                     0.f, got.data(), N);
  quant_gemm_nt_reference(type, M, N, K, A.data(), K, q.data(), 0.f, want.data(), N);
  dequantize_rows(type, q.data(), N, K, w.data(), K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double bound = 0, size = 0;
      for (int64_t b = 0; b < K / 32; ++b) {
        double amax = 0, wsum = 0;
        for (int i = 0; i < 32; ++i) {
          amax = std::max(amax, double(std::fabs(A[m * K + b * 32 + i])));
          wsum += std::fabs(w[n * K + b * 32 + i]);
          size += std::fabs(A[m * K + b * 32 + i] * w[n * K + b * 32 + i]);
        }
        bound += wsum * amax / 127 / 2;
      }
      ASSERT_TRUE(std::isfinite(got[m * N + n]));
      ASSERT_LE(std::fabs(got[m * N + n] - want[m * N + n]), bound * 1.001 + 1e-5 * size)
          << "row " << m << " column " << n;
    }
}

void expect_kernel_matches_scalar(QuantKernel kernel) {
  if (!quant_kernel_available(kernel))
    GTEST_SKIP() << "this CPU lacks " << quant_kernel_name(kernel) << ": its path is not tested";
  // N = 203: 12 whole groups of 16 and a partial one, split over the threads.
  const int64_t K = 320;
  for (int64_t N : {37, 203}) {
    for (QuantType type : kTypes)
      for (int64_t M : {1, 3, 17}) {
        SCOPED_TRACE(std::string(quant_type_name(type)) + " M=" + std::to_string(M) +
                     " N=" + std::to_string(N));
        const auto q = quantised(type, weights(N, K, 2), N, K);
        const auto p = panels(type, q, N, K);
        const auto A = random_vector(M * K, 3);
        std::vector<float> got(M * N, 1.f), scalar(M * N, 1.f);
        // beta 1: accumulating into C.
        quant_gemm_nt_with(kernel, type, M, N, K, A.data(), K, p.data(), 1.f, got.data(), N);
        quant_gemm_nt_with(QuantKernel::Scalar, type, M, N, K, A.data(), K, p.data(), 1.f,
                           scalar.data(), N);
        // The same integer block sums and the same fmas in the same order: bit for bit.
        for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(got[i], scalar[i]) << i;
        expect_scalar_within_activation_rounding(type, M, N, K, A, q);
      }
  }
}

}  // namespace

TEST(QuantGemm, ScalarMatchesTheNaiveReferenceWithinActivationRounding) {
  expect_kernel_matches_scalar(QuantKernel::Scalar);
}
TEST(QuantGemm, Avx2MatchesScalar) { expect_kernel_matches_scalar(QuantKernel::Avx2); }
TEST(QuantGemm, Avx512VnniMatchesScalar) {
  expect_kernel_matches_scalar(QuantKernel::Avx512Vnni);
}
TEST(QuantGemm, Avx512Vnni512MatchesScalar) {
  expect_kernel_matches_scalar(QuantKernel::Avx512Vnni512);
}

TEST(QuantGemm, BatchedRowsEqualSingleRowsBitForBit) {
  const int64_t K = 128, N = 50, M = 64;
  for (QuantType type : kTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const auto q = panels(type, quantised(type, weights(N, K, 4), N, K), N, K);
    const auto A = random_vector(M * K, 5);
    std::vector<float> batched(M * N);
    quant_gemm_nt(type, M, N, K, A.data(), K, q.data(), 0.f, batched.data(), N);
    for (int64_t m : {0L, 1L, 31L, 63L}) {
      std::vector<float> one(N);
      quant_gemm_nt(type, 1, N, K, A.data() + m * K, K, q.data(), 0.f, one.data(), N);
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(one[n], batched[m * N + n]) << m << "," << n;
    }
  }
}

TEST(QuantGemm, EachOutputIsTheSameWhicheverRowsItIsComputedWith) {
  // The kernels compute a group of 16 rows at a time, the last group padded: a row's result must
  // not depend on its group's other rows nor on its place in it (nor on M), so each row repacked
  // alone (N = 1, a padded group) gives the N = 37 product's column bit for bit, on every kernel
  // this CPU has.
  const int64_t K = 192, N = 37, M = 2;
  for (QuantKernel kernel : {QuantKernel::Scalar, QuantKernel::Avx2, QuantKernel::Avx512Vnni,
                              QuantKernel::Avx512Vnni512}) {
    if (!quant_kernel_available(kernel)) continue;
    for (QuantType type : kTypes) {
      SCOPED_TRACE(std::string(quant_type_name(type)) + " " + quant_kernel_name(kernel));
      const auto q = quantised(type, weights(N, K, 10), N, K);
      const auto A = random_vector(M * K, 11);
      std::vector<float> all(M * N);
      quant_gemm_nt_with(kernel, type, M, N, K, A.data(), K, panels(type, q, N, K).data(), 0.f,
                         all.data(), N);
      const size_t row_bytes = quant_row_bytes(type, K);
      for (int64_t n = 0; n < N; ++n) {
        float one[M];
        const std::vector<uint8_t> row(q.begin() + n * row_bytes, q.begin() + (n + 1) * row_bytes);
        quant_gemm_nt_with(kernel, type, M, 1, K, A.data(), K, panels(type, row, 1, K).data(), 0.f,
                           one, 1);
        for (int64_t m = 0; m < M; ++m) ASSERT_EQ(one[m], all[m * N + n]) << m << "," << n;
      }
    }
  }
}

TEST(QuantGemm, ActivationTiesRoundToEvenOnEveryPath) {
  // Blocks whose largest value is 127 (scale 1) and the rest halfway between integers: every
  // path must round them to even, as the scalar one does (nearbyint). One value rounded the other
  // way moves an output by a whole weight step, far beyond the tolerance.
  const int64_t K = 64, N = 5;
  std::vector<float> A(K);
  for (int64_t i = 0; i < K; ++i) A[i] = i % 32 == 0 ? 127.f : float(i % 32) - 16.5f;
  for (QuantKernel kernel :
       {QuantKernel::Avx2, QuantKernel::Avx512Vnni, QuantKernel::Avx512Vnni512}) {
    if (!quant_kernel_available(kernel)) continue;
    for (QuantType type : kTypes) {
      SCOPED_TRACE(std::string(quant_type_name(type)) + " " + quant_kernel_name(kernel));
      const auto q = panels(type, quantised(type, std::vector<float>(N * K, 0.5f), N, K), N, K);
      std::vector<float> got(N), scalar(N);
      quant_gemm_nt_with(kernel, type, 1, N, K, A.data(), K, q.data(), 0.f, got.data(), N);
      quant_gemm_nt_with(QuantKernel::Scalar, type, 1, N, K, A.data(), K, q.data(), 0.f,
                         scalar.data(), N);
      EXPECT_TRUE(test::close(got, scalar, 1e-6));
    }
  }
}

TEST(QuantGemm, PrefillDequantisesToFloat32) {
  // Above kSkinnyMaxRows the activations stay float32: the naive reference to float rounding.
  // N = 300 > 256 rows per dequantised block: a partial last block; strided A and C.
  const int64_t K = 96, N = 300, M = 70, lda = K + 5, ldc = N + 3;
  for (QuantType type : kTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const auto q = quantised(type, weights(N, K, 6), N, K);
    const auto A = random_vector(M * lda, 7);
    std::vector<float> got(M * ldc, 0.5f), want(M * ldc, 0.5f);
    quant_gemm_nt(type, M, N, K, A.data(), lda, panels(type, q, N, K).data(), 1.f, got.data(), ldc);
    quant_gemm_nt_reference(type, M, N, K, A.data(), lda, q.data(), 1.f, want.data(), ldc);
    EXPECT_TRUE(test::close(got, want, 1e-5));
  }
}

TEST(QuantGemm, NonFiniteActivationsGiveNaNNotGarbage) {
  const int64_t K = 64, N = 9;
  const auto q = panels(QuantType::Q8_0, quantised(QuantType::Q8_0, weights(N, K, 8), N, K), N, K);
  auto A = random_vector(K, 9);
  A[40] = INFINITY;
  std::vector<float> C(N);
  quant_gemm_nt(QuantType::Q8_0, 1, N, K, A.data(), K, q.data(), 0.f, C.data(), N);
  for (float c : C) EXPECT_TRUE(std::isnan(c));
}
