// RETNET_MAX_ISA end to end: a capped run picks the AVX2 or scalar decode kernels (as the bench
// report and --version name them) and computes the same logits as the uncapped run, for every
// weight format; a bad value is a clear error. In process: every level of the per-level kernels
// this CPU runs agrees with the reference, and the level chosen follows the CPU and the cap.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_runner.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/core/npy.h"
#include "retnet/core/quant.h"
#include "test_helpers.h"

using retnet::test::fails_cleanly;
using retnet::test::run_retnet;
namespace fs = std::filesystem;

namespace {

// Sets RETNET_MAX_ISA for the runs started in its scope (the tests run one per process).
class ScopedIsaCap {
 public:
  explicit ScopedIsaCap(const char* value) { setenv("RETNET_MAX_ISA", value, 1); }
  ~ScopedIsaCap() { unsetenv("RETNET_MAX_ISA"); }
};

std::vector<float> logits(const std::string& model, const std::string& dtype,
                          const fs::path& out) {
  auto r = run_retnet("logits -m " + model + " --dtype " + dtype +
                      " --tokens 1,7,42,3,250,9,0,77 --mode recurrent --out " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  return retnet::read_npy(out.string()).data;
}

nlohmann::json bench_machine(const std::string& model, const fs::path& out) {
  auto r = run_retnet("bench model -m " + model + " --probe-mib 16 --dtype q8_0 --prefill 8 " +
                          "--decode 2 --reps 1 --json " + out.string(),
                      120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  std::ifstream in(out);
  return nlohmann::json::parse(in)["machine"];
}

}  // namespace

TEST(CpuIsaCap, CappedRunsChooseOlderKernelsAndComputeTheSameLogits) {
  const fs::path dir = retnet::test::fresh_temp_dir("isa_cap");
  // A BF16 directory: --dtype bf16 then decodes from the mapped weights (row-major kernels).
  const std::string config = retnet::test::write_file(
      dir / "config.json",
      R"({"model_type": "retnet", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2,
          "expand_k": 1, "expand_v": 2, "hidden_ratio": 2, "vocab_size": 256})");
  const std::string model = (dir / "m").string();
  ASSERT_EQ(run_retnet("init --config " + config + " --out " + model + " --dtype bf16").exit_code,
            0);

  // The norms, activations and rotations follow the level too (their sums in another lane order,
  // with or without FMA), so no weight format gives the uncapped logits bit for bit; the
  // quantised kernels' own agreement, bit for bit, is test_quant.cpp's.
  const std::vector<std::string> dtypes = {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"};
  std::vector<std::vector<float>> uncapped;
  for (const auto& dtype : dtypes) {
    uncapped.push_back(logits(model, dtype, dir / "uncapped.npy"));
    ASSERT_FALSE(uncapped.back().empty()) << dtype;
  }

  const bool cpu_avx2 = retnet::rowmajor_kernel_available(retnet::RowMajorKernel::Avx2);
  for (const char* cap : {"avx2", "scalar"}) {
    SCOPED_TRACE(cap);
    const bool scalar = std::string(cap) == "scalar" || !cpu_avx2;
    ScopedIsaCap scoped(cap);
    const nlohmann::json machine = bench_machine(model, dir / "bench.json");
    EXPECT_EQ(machine["isa_cap"], cap);
    // avx2 on AMD, avx2-prefetch on Intel.
    const std::string rowmajor = machine["rowmajor_decode_kernel"].get<std::string>();
    EXPECT_EQ(rowmajor.substr(0, scalar ? 6 : 4), scalar ? "scalar" : "avx2") << rowmajor;
    EXPECT_EQ(machine["quant_decode_kernel"], scalar ? "scalar" : "avx2");
    const std::string level = scalar ? "scalar" : "avx2";
    EXPECT_EQ(machine["kernel_isa"], level);
    EXPECT_EQ(machine["packed_decode_kernel"], level);
    EXPECT_EQ(machine["skinny_decode_kernel"], level);
    EXPECT_EQ(machine["ops_decode_kernel"], level);
    EXPECT_EQ(machine["mixers_decode_kernel"], level);
    const auto version = run_retnet("--version");
    EXPECT_EQ(version.exit_code, 0) << version.err;
    EXPECT_NE(version.out.find("Kernels: " + level + " (cpu "), std::string::npos) << version.out;
    EXPECT_NE(version.out.find("packed " + level + ", skinny " + level), std::string::npos)
        << version.out;
    for (size_t i = 0; i < dtypes.size(); ++i) {
      SCOPED_TRACE(dtypes[i]);
      const auto capped = logits(model, dtypes[i], dir / "capped.npy");
      EXPECT_LE(retnet::test::rel_max_error(capped, uncapped[i]), 1e-5);
    }
  }

  ScopedIsaCap bad("avx9000");
  EXPECT_TRUE(fails_cleanly(run_retnet("logits -m " + model + " --tokens 1,2 --mode recurrent "
                                       "--out " + (dir / "x.npy").string()),
                            "RETNET_MAX_ISA = 'avx9000'"));
  fs::remove_all(dir);
}

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// C = A B^T + beta C in double, B [N, K] row-major.
std::vector<float> reference_product(int64_t M, int64_t N, int64_t K, const std::vector<float>& A,
                                     const std::vector<float>& B, float beta,
                                     std::vector<float> C) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(A[m * K + k]) * B[n * K + k];
      C[m * N + n] = static_cast<float>(s + double(beta) * C[m * N + n]);
    }
  return C;
}

std::vector<retnet::Isa> levels_of_this_cpu() {
  std::vector<retnet::Isa> out;
  for (retnet::Isa level : {retnet::Isa::Scalar, retnet::Isa::Avx2, retnet::Isa::Avx512})
    if (level <= retnet::cpu_isa()) out.push_back(level);
  return out;
}

}  // namespace

// Run by the capped passes too (scripts/test.sh): the level chosen follows RETNET_MAX_ISA.
TEST(IsaKernels, ChosenLevelFollowsTheCpuAndTheCap) {
  const char* cap = std::getenv("RETNET_MAX_ISA");
  const std::string want = cap && *cap ? cap : "avx512";
  const retnet::Isa expected = std::min(retnet::cpu_isa(), retnet::isa_cap());
  EXPECT_EQ(retnet::isa_name(retnet::isa_cap()), want);
  EXPECT_EQ(retnet::kernel_isa(), expected);
  const auto choices = retnet::kernel_choices();
  ASSERT_EQ(choices.size(), 6u);
  const std::string level = retnet::isa_name(expected);
  EXPECT_EQ(choices[0].first + " " + choices[0].second, "packed " + level);
  EXPECT_EQ(choices[1].first + " " + choices[1].second, "skinny " + level);
  EXPECT_EQ(choices[2].second.substr(0, level.size()), level);  // rowmajor: avx2-prefetch on Intel
  EXPECT_EQ(choices[4].first + " " + choices[4].second, "ops " + level);
  EXPECT_EQ(choices[5].first + " " + choices[5].second, "mixers " + level);
  if (retnet::cpu_isa() < retnet::Isa::Avx512) {
    std::vector<float> a(16), c(1);
    EXPECT_THROW(retnet::skinny_gemm_nt_at(retnet::Isa::Avx512, 1, 1, 16, a.data(), 16, a.data(),
                                           16, 0.f, c.data(), 1),
                 retnet::Error);
  }
}

// Every level of the skinny and packed kernels this CPU runs, against the double reference:
// batch sizes through each kernel's tile shapes, N and K off the vector widths, beta 0 and not.
TEST(IsaKernels, EveryLevelAgreesWithTheReference) {
  const int64_t N = 37, K = 67;
  const std::vector<float> B = random_values(N * K, 1);
  std::vector<float> f32(retnet::packed_weight_elements(N, K));
  std::vector<uint16_t> f16(f32.size());
  std::vector<retnet::BFloat16> bf16(f32.size());
  retnet::pack_weights(B.data(), N, K, K, f32.data());
  retnet::pack_weights_f16(B.data(), N, K, K, f16.data());
  retnet::pack_weights_bf16(B.data(), N, K, K, bf16.data());
  // The reduced-precision weights as the kernels see them.
  std::vector<float> B16(B.size()), Bbf(B.size());
  for (size_t i = 0; i < B.size(); ++i) {
    B16[i] = retnet::half_to_float(retnet::float_to_half(B[i]));
    Bbf[i] = retnet::bf16_to_float(retnet::float_to_bf16(B[i]));
  }
  for (retnet::Isa level : levels_of_this_cpu()) {
    SCOPED_TRACE(retnet::isa_name(level));
    for (int64_t M : {1, 2, 3, 4, 5, 7, 16}) {
      for (float beta : {0.f, 0.5f}) {
        SCOPED_TRACE(testing::Message() << "M " << M << " beta " << beta);
        const std::vector<float> A = random_values(M * K, 2 + M);
        const std::vector<float> C0 = random_values(M * N, 3);
        std::vector<float> C = C0;
        retnet::skinny_gemm_nt_at(level, M, N, K, A.data(), K, B.data(), K, beta, C.data(), N);
        EXPECT_TRUE(retnet::test::close(C, reference_product(M, N, K, A, B, beta, C0), 1e-5));
        C = C0;
        retnet::packed_gemm_nt_at(level, M, N, K, A.data(), K, f32.data(), beta, C.data(), N);
        EXPECT_TRUE(retnet::test::close(C, reference_product(M, N, K, A, B, beta, C0), 1e-5));
        C = C0;
        retnet::packed_gemm_nt_at(level, M, N, K, A.data(), K, f16.data(), beta, C.data(), N);
        EXPECT_TRUE(retnet::test::close(C, reference_product(M, N, K, A, B16, beta, C0), 1e-5));
        C = C0;
        retnet::packed_gemm_nt_at(level, M, N, K, A.data(), K, bf16.data(), beta, C.data(), N);
        EXPECT_TRUE(retnet::test::close(C, reference_product(M, N, K, A, Bbf, beta, C0), 1e-5));
      }
    }
  }
}
