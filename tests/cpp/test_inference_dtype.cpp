// Inference in f32, bf16 and f16 from one packed copy of the projections (prepare_inference): the
// packed kernels against naive references at every row count (decode panels and the prefill path
// that unpacks them for sgemm), logits of every dtype against float32 within a stated bound,
// prefill = decode, greedy generation, and the released float32 weights refusing training/saving.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/infer/session.h"
#include "retnet/model/forward.h"
#include "retnet/model/model_io.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::random_vector;

namespace {


std::vector<float> parallel_logits(const Model& m, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.config().vocab_size;
  std::vector<float> logits(T * V);
  Arena arena;
  forward_logits(m, tokens.data(), 1, T, logits.data(), {}, arena);
  return logits;
}

std::vector<int32_t> token_sequence(int64_t T, int64_t vocab) {
  std::vector<int32_t> t(T);
  for (int64_t i = 0; i < T; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return t;
}

// The stated bounds: max |logit - f32 logit| / max |f32 logit| over a 100-token sequence of the
// small model (measured: f16 4.8e-4, bf16 4.0e-3, about 4x below the bounds; bf16 keeps 8
// significant bits, f16 11; f32 differs from sgemm only in the order of its sums).
double dtype_logit_bound(DecodePrecision p) {
  switch (p) {
    case DecodePrecision::F16:
      return 2e-3;
    case DecodePrecision::BF16:
      return 1.5e-2;
    default:
      return 1e-5;
  }
}

}  // namespace

TEST(PackedGemm, EveryTypeMatchesTheNaiveReferenceAtEveryRowCount) {
  // Row counts through the decode kernels (1..64) and the unpack-then-sgemm prefill path (65+,
  // with a partial last block of panels at N = 530 > 512 columns); strided A and C; beta 0 and 1.
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 7, 5}, {3, 72, 33}, {6, 256, 64},
                         {64, 70, 64}, {65, 33, 20}, {100, 530, 48}, {200, 16, 130}}) {
    const int64_t lda = K + 2, ldc = N + 3;
    const auto A = random_vector(M * lda, 7), B = random_vector(N * K, 8);
    std::vector<float> f32(packed_weight_elements(N, K));
    std::vector<uint16_t> f16(f32.size());
    std::vector<BFloat16> bf16(f32.size());
    pack_weights(B.data(), N, K, K, f32.data());
    pack_weights_f16(B.data(), N, K, K, f16.data());
    pack_weights_bf16(B.data(), N, K, K, bf16.data());
    std::vector<float> rounded(B.size());
    for (size_t i = 0; i < B.size(); ++i) {
      rounded[i] = bf16_to_float(float_to_bf16(B[i]));
      // bf16 keeps 8 significant bits: round to nearest is within half a unit, 2^-8 relative.
      ASSERT_LE(std::fabs(rounded[i] - B[i]), std::fabs(B[i]) * (1.0 / 256)) << B[i];
    }
    for (int type = 0; type < 3; ++type)
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " type " << type
                                          << " beta " << beta);
        auto C = random_vector(M * ldc, 9), R = C;
        const auto input = C;
        if (type == 0) {
          packed_gemm_nt(M, N, K, A.data(), lda, f32.data(), beta, C.data(), ldc);
          packed_gemm_nt_reference(M, N, K, A.data(), lda, f32.data(), beta, R.data(), ldc);
        } else if (type == 1) {
          packed_gemm_nt_f16(M, N, K, A.data(), lda, f16.data(), beta, C.data(), ldc);
          packed_gemm_nt_reference(M, N, K, A.data(), lda, f16.data(), beta, R.data(), ldc);
        } else {
          packed_gemm_nt_bf16(M, N, K, A.data(), lda, bf16.data(), beta, C.data(), ldc);
          packed_gemm_nt_reference(M, N, K, A.data(), lda, bf16.data(), beta, R.data(), ldc);
        }
        EXPECT_TRUE(close(C, R, 1e-5));  // fails on NaN/Inf
        for (int64_t m = 0; m < M; ++m)  // columns past N untouched
          for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], input[m * ldc + n]);
      }
    // The bf16 reference itself is the product with the rounded weights.
    std::vector<float> R1(M * ldc, 0.f), R2(M * ldc, 0.f);
    packed_gemm_nt_reference(M, N, K, A.data(), lda, bf16.data(), 0.f, R1.data(), ldc);
    sgemm_reference(Trans::No, Trans::Yes, M, N, K, 1.f, A.data(), lda, rounded.data(), K, 0.f,
                    R2.data(), ldc);
    EXPECT_TRUE(close(R1, R2, 1e-6));
  }
}

TEST(InferenceDtype, LogitsOfEveryDtypeStayWithinTheirBoundOfF32) {
  const Model exact = Model::init(test::small_decode_config(), 5);
  const auto tokens = token_sequence(100, 256);  // 100 rows: the prefill (unpacking) path
  const auto reference = parallel_logits(exact, tokens);
  for (DecodePrecision p : {DecodePrecision::F32, DecodePrecision::F16, DecodePrecision::BF16}) {
    SCOPED_TRACE(decode_precision_name(p));
    Model m = Model::init(test::small_decode_config(), 5);
    m.prepare_inference(p);
    EXPECT_FALSE(m.weights_complete());
    const auto logits = parallel_logits(m, tokens);
    const double err = retnet::test::rel_max_error(logits, reference);
    EXPECT_TRUE(close(logits, reference, dtype_logit_bound(p)));
    if (p != DecodePrecision::F32) {
      EXPECT_GT(err, 0.0) << "half weights should round";
    }
    // bf16 and f16 also change the argmax rarely: at most 3 of 100 positions here.
    int changed = 0;
    for (int64_t t = 0; t < 100; ++t) {
      const float* a = logits.data() + t * 256;
      const float* b = reference.data() + t * 256;
      changed += (std::max_element(a, a + 256) - a) != (std::max_element(b, b + 256) - b);
    }
    EXPECT_LE(changed, 3);
  }
}

TEST(InferenceDtype, PrefillThenDecodeEqualsParallelLogitsInEveryDtype) {
  // The same weights serve prefill (80 rows: unpacked to sgemm) and decode (1 row: panels): the
  // decoded logits agree with the parallel form of the same prepared model to float rounding.
  const auto tokens = token_sequence(96, 256);
  for (DecodePrecision p : {DecodePrecision::F32, DecodePrecision::F16, DecodePrecision::BF16}) {
    SCOPED_TRACE(decode_precision_name(p));
    Model m = Model::init(test::small_decode_config(), 9);
    m.prepare_inference(p);
    const auto all = parallel_logits(m, tokens);
    Session s(m);
    s.add_sequence();
    s.prefill(0, tokens.data(), 80);
    for (int64_t t = 80; t < 96; ++t) {
      const std::vector<float> expected(all.begin() + (t - 1) * 256, all.begin() + t * 256);
      const std::vector<float> got(s.logits(0), s.logits(0) + 256);
      ASSERT_TRUE(close(got, expected, 2e-5)) << "position " << t;
      s.step(&tokens[t]);
    }
  }
}

TEST(InferenceDtype, GreedyGenerationFromBf16WeightsIsTheArgmaxOfItsParallelLogits) {
  Model m = Model::init(test::small_decode_config(), 13);
  m.prepare_inference(DecodePrecision::BF16);
  std::vector<int32_t> seq = token_sequence(12, 256);
  Session s(m);
  s.add_sequence();
  s.prefill(0, seq.data(), 12);
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int i = 0; i < 24; ++i) {
    const int32_t next = s.sample(0, greedy);
    seq.push_back(next);
    s.step(&next);
  }
  const auto logits = parallel_logits(m, seq);
  for (int64_t t = 11; t + 1 < static_cast<int64_t>(seq.size()); ++t) {
    const float* z = logits.data() + t * 256;
    ASSERT_EQ(seq[t + 1], std::max_element(z, z + 256) - z) << "position " << t;
  }
}

TEST(InferenceDtype, ReleasedWeightsRefuseTrainingAndSavingButKeepTheFingerprint) {
  Model m = Model::init(test::small_decode_config(), 3);
  const uint64_t before = model_fingerprint(m);
  m.prepare_inference(DecodePrecision::BF16);
  EXPECT_EQ(model_fingerprint(m), before);
  auto says = [](auto&& f, const std::string& part) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find(part) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(says([&] { m.params(); }, "training"));
  EXPECT_TRUE(says([&] { m.param(m.tensors().layers[0].k_proj); }, "layers.0.retention.k_proj"));
  EXPECT_TRUE(says([&] { m.prepare_decode(DecodePrecision::F32); }, "released"));
  const auto path = std::filesystem::temp_directory_path() / "retnet_released.safetensors";
  EXPECT_TRUE(says([&] { save_model(m, path.string()); }, "saving the model"));
  EXPECT_FALSE(std::filesystem::exists(path));
  // Norms stay float32 and readable.
  EXPECT_EQ(m.param(m.tensors().layers[0].mixer_norm)[0], 1.f);
}

TEST(InferenceDtype, APassRefusedHalfWayLeavesTheReleasedWeightsRefusedNotZero) {
  // f16 refuses a weight past its range when it reaches it, after the earlier products were
  // packed and their float32 pages released: those must then be refused by name, never read as
  // the zeros the released pages hold.
  Model m = Model::init(test::small_decode_config(), 3);
  const LayerTensors& last = m.tensors().layers.back();
  m.params().tensor(last.fc2)[5] = 1e6f;
  EXPECT_TRUE(test::throws_error_naming([&] { m.prepare_inference(DecodePrecision::F16); },
                                        {"f16 range", m.params().layout()[last.fc2].name}));
  EXPECT_FALSE(m.weights_complete());
  EXPECT_TRUE(test::throws_error_naming([&] { m.param(m.tensors().layers[0].q_proj); },
                                        {"released", "layers.0.retention.q_proj"}));
  EXPECT_EQ(m.param(m.tensors().layers[0].mixer_norm)[0], 1.f);
  // Refused before anything is released (a width not a multiple of 32): the model is unchanged.
  Model odd = Model::init(test::tiny_config(), 3);
  EXPECT_THROW(odd.prepare_inference(DecodePrecision::Q8_0), Error);
  EXPECT_TRUE(odd.weights_complete());
}

TEST(InferenceDtype, ACopySharingTheStorageKeepsItsWeights) {
  // Copies share the parameter storage: preparing one must not take the other's weights.
  Model a = Model::init(test::small_decode_config(), 4);
  Model b = a;
  b.prepare_inference(DecodePrecision::BF16);
  EXPECT_TRUE(a.weights_complete());
  EXPECT_TRUE(b.weights_complete());  // nothing released: the storage is shared
  EXPECT_EQ(model_fingerprint(a), model_fingerprint(Model::init(test::small_decode_config(), 4)));
  const auto tokens = token_sequence(20, 256);
  EXPECT_TRUE(close(parallel_logits(b, tokens), parallel_logits(a, tokens), 1.5e-2));
}

TEST(InferenceDtype, UnknownDtypeNamesTheOptionAndTheValue) {
  try {
    parse_decode_precision("f8", "--dtype");
    FAIL() << "f8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype: 'f8'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_decode_precision("bf16", "--dtype"), DecodePrecision::BF16);
}
