// Products against row-major weights used in place (retnet/core/gemm_rowmajor.h): every ISA path
// that this CPU has and every weight type against the naive reference, at decode row counts and
// through the prefill path; batched rows equal single rows bit for bit; columns past N untouched.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/half.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::random_vector;

namespace {

// The weights of one test in the three types, row-major with row stride ldw (> K: a view of a
// wider matrix must read only its own columns).
struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<BFloat16> bf16;
  Weights(int64_t N, int64_t ldw, uint64_t seed) : f32(random_vector(N * ldw, seed)) {
    for (float w : f32) {
      f16.push_back(float_to_half(w));
      bf16.push_back(BFloat16{float_to_bf16(w)});
    }
  }
};

// C = A W^T + beta C through `run`, against the reference; then each row of A alone must give
// that row of the batched result exactly (batch invariance).
template <typename W, typename Run>
void check_product(const char* type, Run run, int64_t M, int64_t N, int64_t K, const W* w,
                   int64_t ldw) {
  const int64_t lda = K + 3, ldc = N + 2;
  const auto A = random_vector(M * lda, 21);
  for (float beta : {0.f, 1.f}) {
    SCOPED_TRACE(::testing::Message() << type << " " << M << "x" << N << "x" << K << " beta "
                                      << beta);
    auto C = random_vector(M * ldc, 22), R = C;
    const auto input = C;
    run(M, A.data(), lda, C.data(), ldc, beta);
    rowmajor_gemm_nt_reference(M, N, K, A.data(), lda, w, ldw, beta, R.data(), ldc);
    EXPECT_TRUE(close(C, R, 1e-5));  // fails on NaN/Inf
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], input[m * ldc + n]);
    if (M > kSkinnyMaxRows || beta != 0.f) continue;
    for (int64_t m = 0; m < M; ++m) {
      std::vector<float> one(ldc, 0.f);
      run(1, A.data() + m * lda, lda, one.data(), ldc, 0.f);
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(one[n], C[m * ldc + n]) << "row " << m << " of " << M << ", column " << n;
    }
  }
}

const std::array<std::array<int64_t, 3>, 8> kShapes = {{{1, 7, 5},
                                                         {2, 9, 16},
                                                         {3, 17, 33},
                                                         {4, 8, 8},
                                                         {5, 40, 100},
                                                         {7, 13, 1},
                                                         {16, 24, 47},
                                                         {64, 19, 64}}};

}  // namespace

TEST(RowMajorGemm, EveryKernelAndTypeMatchesTheReferenceAndIsBatchInvariant) {
  int tested = 0;
  for (RowMajorKernel kernel :
       {RowMajorKernel::Scalar, RowMajorKernel::Avx2, RowMajorKernel::Avx2Prefetch,
        RowMajorKernel::Avx512, RowMajorKernel::Avx512Prefetch}) {
    if (!rowmajor_kernel_available(kernel)) {
      std::printf("skipping the %s kernel: this CPU lacks it\n", rowmajor_kernel_name(kernel));
      continue;
    }
    ++tested;
    SCOPED_TRACE(rowmajor_kernel_name(kernel));
    for (auto [M, N, K] : kShapes) {
      const int64_t ldw = K + 5;
      const Weights w(N, ldw, 23);
      auto with = [&, N = N, K = K](const auto* data) {
        return [&, data](int64_t m, const float* a, int64_t lda, float* c, int64_t ldc,
                         float beta) {
          rowmajor_gemm_nt_with(kernel, m, N, K, a, lda, data, ldw, beta, c, ldc);
        };
      };
      check_product("f32", with(w.f32.data()), M, N, K, w.f32.data(), ldw);
      check_product("f16", with(w.f16.data()), M, N, K, w.f16.data(), ldw);
      check_product("bf16", with(w.bf16.data()), M, N, K, w.bf16.data(), ldw);
    }
  }
  EXPECT_GE(tested, 1);
}

TEST(RowMajorGemm, TheDispatchedProductCoversDecodeAndPrefillRowCounts) {
  // 1..64 rows: the best decode kernel; 65+: sgemm (f32) or converted blocks (f16/bf16), with a
  // partial last block of 256 converted rows at N = 300.
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 70, 64}, {64, 33, 20}, {65, 33, 20},
                         {100, 300, 48}}) {
    const int64_t ldw = K + 1;
    const Weights w(N, ldw, 24);
    auto run = [&, N = N, K = K](const auto* data) {
      return [&, data](int64_t m, const float* a, int64_t lda, float* c, int64_t ldc, float beta) {
        rowmajor_gemm_nt(m, N, K, a, lda, data, ldw, beta, c, ldc);
      };
    };
    check_product("f32", run(w.f32.data()), M, N, K, w.f32.data(), ldw);
    check_product("f16", run(w.f16.data()), M, N, K, w.f16.data(), ldw);
    check_product("bf16", run(w.bf16.data()), M, N, K, w.bf16.data(), ldw);
  }
}

TEST(RowMajorGemm, RowsAreReadAsFloat32TimesTheScale) {
  const Weights w(3, 10, 25);
  std::vector<float> out(8);
  rowmajor_row(w.bf16.data(), 10, 8, 2, 0.5f, out.data());
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(out[k], 0.5f * bf16_to_float(w.bf16[20 + k].bits));
  rowmajor_row(w.f16.data(), 10, 8, 1, 2.f, out.data());
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(out[k], 2.f * half_to_float(w.f16[10 + k]));
  rowmajor_row(w.f32.data(), 10, 8, 0, 1.f, out.data());
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(out[k], w.f32[k]);
}

TEST(RowMajorGemm, PartsStackedAsOneMatrixEqualOneCallPerPart) {
  // q|k|v|g stored as separate tensors: parts of 5, 16 and 9 rows, at decode and prefill rows.
  const int64_t K = 40, rows[3] = {5, 16, 9}, N = 30;
  const Weights w(N, K, 26);
  const BFloat16* parts[3] = {w.bf16.data(), w.bf16.data() + 5 * K, w.bf16.data() + 21 * K};
  for (int64_t M : {1, 3, 64, 70}) {
    const auto A = random_vector(M * K, 27);
    std::vector<float> together(M * N), apart(M * N);
    rowmajor_gemm_nt_parts(M, K, A.data(), K, 3, parts, rows, 0.f, together.data(), N);
    for (int i = 0, column = 0; i < 3; column += static_cast<int>(rows[i]), ++i)
      rowmajor_gemm_nt(M, rows[i], K, A.data(), K, parts[i], K, 0.f, apart.data() + column, N);
    EXPECT_EQ(together, apart) << M;
    std::vector<float> whole(M * N);
    rowmajor_gemm_nt_reference(M, N, K, A.data(), K, w.bf16.data(), K, 0.f, whole.data(), N);
    EXPECT_TRUE(close(together, whole, 1e-5)) << M;
  }
}

TEST(RowMajorGemm, Batch1StreamsAcrossPartsAndThreadsEqualTheBatchedRows) {
  // Large enough for the threads to split the rows (batch 1 may read each thread's share as
  // several streams, whose stretches and remainders cross the parts' boundaries): one row of A
  // must give the batched product's row bit for bit, with every kernel this CPU has.
  const int64_t K = 300, rows[3] = {37, 101, 59}, N = 197, M = 3;
  const Weights w(N, K, 28);
  const BFloat16* parts[3] = {w.bf16.data(), w.bf16.data() + 37 * K, w.bf16.data() + 138 * K};
  const auto A = random_vector(M * K, 29);
  std::vector<float> batched(M * N, 1.f);
  rowmajor_gemm_nt_parts(M, K, A.data(), K, 3, parts, rows, 0.5f, batched.data(), N);
  for (int64_t m = 0; m < M; ++m) {
    std::vector<float> single(N, 1.f);
    rowmajor_gemm_nt_parts(1, K, A.data() + m * K, K, 3, parts, rows, 0.5f, single.data(), N);
    EXPECT_EQ(single, std::vector<float>(batched.begin() + m * N, batched.begin() + (m + 1) * N))
        << m;
  }
  for (RowMajorKernel kernel : {RowMajorKernel::Avx2, RowMajorKernel::Avx2Prefetch,
                                RowMajorKernel::Avx512, RowMajorKernel::Avx512Prefetch}) {
    if (!rowmajor_kernel_available(kernel)) continue;
    SCOPED_TRACE(rowmajor_kernel_name(kernel));
    std::vector<float> batched_with(M * N, 1.f), single(N, 1.f);
    rowmajor_gemm_nt_with(kernel, M, N, K, A.data(), K, w.bf16.data(), K, 0.5f,
                          batched_with.data(), N);
    rowmajor_gemm_nt_with(kernel, 1, N, K, A.data() + K, K, w.bf16.data(), K, 0.5f, single.data(),
                          N);
    EXPECT_EQ(single, std::vector<float>(batched_with.begin() + N, batched_with.begin() + 2 * N));
    std::vector<float> whole(M * N, 1.f);
    rowmajor_gemm_nt_reference(M, N, K, A.data(), K, w.bf16.data(), K, 0.5f, whole.data(), N);
    EXPECT_TRUE(close(batched_with, whole, 1e-5));
  }
}
