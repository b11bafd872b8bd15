// RETNET_MAX_ISA end to end: a capped run picks the AVX2 or scalar decode kernels (as the bench
// report names them) and computes the same logits as the uncapped run, for every weight format
// whose decode kernels are chosen at run time; a bad value is a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/gemm_rowmajor.h"
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

  // Quantised panels: every ISA path computes the scalar kernel's integer sums and fmas, bit
  // for bit. Row-major bf16/f16: the same products summed in another lane order. f32 decodes
  // from packed panels compiled for the build machine, which the cap leaves alone.
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
    for (size_t i = 0; i < dtypes.size(); ++i) {
      SCOPED_TRACE(dtypes[i]);
      const bool exact = dtypes[i][0] == 'q' || dtypes[i] == "f32";
      const auto capped = logits(model, dtypes[i], dir / "capped.npy");
      EXPECT_LE(retnet::test::rel_max_error(capped, uncapped[i]), exact ? 0.0 : 1e-5);
    }
  }

  ScopedIsaCap bad("avx9000");
  EXPECT_TRUE(fails_cleanly(run_retnet("logits -m " + model + " --tokens 1,2 --mode recurrent "
                                       "--out " + (dir / "x.npy").string()),
                            "RETNET_MAX_ISA = 'avx9000'"));
  fs::remove_all(dir);
}
