// `retnet bench decode --quick` end to end (about 3 s on 2 cores): every figure is in its JSON with
// finite, positive numbers, the ceiling is consistent with its parts, and the saved position states
// it works from are removed afterwards.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/quant.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A {median, min, max} summary of positive, finite figures.
void expect_summary(const json& s, const std::string& where) {
  ASSERT_TRUE(s.is_object()) << where;
  for (const char* key : {"median", "min", "max"}) {
    ASSERT_TRUE(s.contains(key)) << where << " " << key;
    const double v = s[key].get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << where << " " << key << " " << v;
  }
  EXPECT_LE(s["min"].get<double>(), s["median"].get<double>()) << where;
  EXPECT_LE(s["median"].get<double>(), s["max"].get<double>()) << where;
}

// Position states of `bench decode` runs (any process) in the temporary directory.
int state_files_left() {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    n += e.path().filename().string().rfind("retnet-bench-", 0) == 0 &&
         e.path().filename().string().find("-position-") != std::string::npos;
  return n;
}

}  // namespace

TEST(BenchDecode, QuickRunWritesEveryFigure) {
  const fs::path out =
      fs::temp_directory_path() / ("retnet_bench_decode_" + std::to_string(getpid()) + ".json");
  const int before = state_files_left();
  auto r =
      retnet::test::run_retnet("bench decode --quick --reps 2 --threads 2 --json " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* line : {"decode latency per token by position",
                           "decode throughput by batch size", "ceiling:", "prefill tokens/s"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  std::ifstream in(out);
  ASSERT_TRUE(in.good());
  const json res = json::parse(in);
  fs::remove(out);

  for (const char* p : {"16", "1024"}) expect_summary(res["latency_ms_by_position"][p], p);
  for (const char* b : {"1", "4"}) {
    expect_summary(res["decode_tokens_per_s_by_batch"][b], b);
    expect_summary(res["decode_tokens_per_s_by_batch_f16"][b], b);
  }
  expect_summary(res["prefill_tokens_per_s"]["512"]["parallel"], "prefill parallel");
  expect_summary(res["prefill_tokens_per_s"]["512"]["chunkwise"], "prefill chunkwise");

  // The default model's products: 4 layers x (1536 x 256 + 256 x 512 + 3 x 512 x 256) + 256 x 256
  // multiply-adds per token; the ceiling is the kernel's speed over them.
  const json& c = res["decode_ceiling"];
  const double flop = 2.0 * (4 * (1536 * 256 + 256 * 512 + 3 * 512 * 256) + 256 * 256);
  EXPECT_DOUBLE_EQ(c["product_flop_per_token"].get<double>(), flop);
  expect_summary(c["kernel_gflops_64_rows"], "kernel");
  EXPECT_NEAR(c["tokens_per_s"].get<double>(),
              c["kernel_gflops_64_rows"]["median"].get<double>() * 1e9 / flop,
              1e-6 * c["tokens_per_s"].get<double>());

  EXPECT_EQ(state_files_left(), before) << "bench decode left its position states behind";
}

// `retnet bench model` on a small fla directory: every figure present, finite and positive, the
// roofline consistent with its parts.
TEST(BenchModel, SmallDirectoryWritesEveryFigure) {
  const fs::path dir = fs::temp_directory_path() / ("retnet_bench_model_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "retnet", "hidden_size": 64,
    "num_hidden_layers": 2, "num_heads": 2, "vocab_size": 256})";
  auto init = retnet::test::run_retnet("init --config " + (dir / "config.json").string() +
                                       " --out " + (dir / "fla").string() + " --dtype bf16");
  ASSERT_EQ(init.exit_code, 0) << init.err;
  std::vector<double> bytes_per_token;
  for (const std::string dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string out = (dir / ("r_" + dtype + ".json")).string();
    auto r = retnet::test::run_retnet("bench model -m " + (dir / "fla").string() +
                                          " --probe-mib 16 --dtype " + dtype +
                                          " --prefill 8 --prefill 80 --decode 6 --reps 1 --json " +
                                          out,
                                      120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(out);
    const json j = json::parse(in);
    EXPECT_EQ(j["model"]["stored_dtype"], "BF16");
    EXPECT_EQ(j["model"]["dtype"], dtype);
    // The decode kernels the figures come from, as the dispatch chose them on this CPU.
    EXPECT_EQ(j["machine"]["rowmajor_decode_kernel"].get<std::string>(),
              rowmajor_kernel_name(rowmajor_kernel_best()));
    EXPECT_EQ(j["machine"]["quant_decode_kernel"].get<std::string>(),
              quant_kernel_name(quant_kernel_best()));
    EXPECT_NE(r.out.find(std::string("row-major weights ") +
                         rowmajor_kernel_name(rowmajor_kernel_best())),
              std::string::npos);
    for (const char* key : {"load_seconds", "rss_after_load_bytes", "stored_bytes",
                            "rss_after_prepare_bytes", "weight_bytes_in_dtype"})
      EXPECT_GT(j["model"][key].get<double>(), 0) << key;
    // Each type's peak is its own load's (reset before it), so it is at least what it left.
    ASSERT_TRUE(j["model"]["peak_rss_is_this_load_only"].is_boolean());
    EXPECT_GE(j["model"]["peak_rss_during_load_bytes"].get<double>(),
              j["model"]["rss_after_load_bytes"].get<double>());
    ASSERT_EQ(j["prefill"].size(), 2u);
    for (const auto& p : j["prefill"])
      EXPECT_TRUE(p["tokens_per_s"].get<double>() > 0 && p["gemm_gflops"].get<double>() > 0);
    const json& d = j["decode"];
    EXPECT_GT(d["tokens_per_s"].get<double>(), 0);
    bytes_per_token.push_back(d["bytes_per_token"].get<double>());
    // The roofline's bandwidth is the best of the three probes (the run's start, just before
    // and just after this decode).
    ASSERT_EQ(d["read_bandwidth_probes_bytes_per_s"].size(), 3u);
    double best = 0;
    for (const auto& probe : d["read_bandwidth_probes_bytes_per_s"]) {
      EXPECT_GT(probe.get<double>(), 0);
      best = std::max(best, probe.get<double>());
    }
    EXPECT_EQ(d["read_bandwidth_bytes_per_s"].get<double>(), best);
    // The spread of the before and after probes flags a decode during which the bandwidth moved.
    const double before = d["read_bandwidth_probes_bytes_per_s"][1].get<double>(),
                 after = d["read_bandwidth_probes_bytes_per_s"][2].get<double>();
    const double spread = std::max(before, after) / std::min(before, after);
    EXPECT_DOUBLE_EQ(d["read_bandwidth_before_after_spread"].get<double>(), spread);
    EXPECT_EQ(d["read_bandwidth_moved"].get<bool>(), spread > 1.25);
    EXPECT_NEAR(d["roofline_tokens_per_s"].get<double>(),
                d["read_bandwidth_bytes_per_s"].get<double>() / d["bytes_per_token"].get<double>(),
                1e-6 * d["roofline_tokens_per_s"].get<double>());
    // The second roofline adds the recurrent state, read and written once per step: 2 layers x
    // 2 heads x 32 x (64 + 1) floats (`retnet info` says 33,280 bytes), twice.
    const double state = d["state_bytes_read_and_written_per_token"].get<double>();
    EXPECT_EQ(state, 2 * 33280.0);
    EXPECT_NEAR(d["roofline_with_state_tokens_per_s"].get<double>(),
                d["read_bandwidth_bytes_per_s"].get<double>() /
                    (d["bytes_per_token"].get<double>() + state),
                1e-6 * d["roofline_tokens_per_s"].get<double>());
  }
  // The roofline counts the dtype's bytes: bf16 reads half of f32's matrices (plus one f32
  // embedding row in both).
  ASSERT_EQ(bytes_per_token.size(), 2u);
  EXPECT_NEAR(bytes_per_token[1], bytes_per_token[0] / 2, 0.01 * bytes_per_token[0]);
  // An unknown dtype is refused by every inference command, naming the option.
  for (const std::string cmd : {"bench model -m ", "generate -p hi -m ", "info ",
                                "logits --tokens 1,2 --out x.npy -m ", "eval --data x -m "}) {
    auto bad = retnet::test::run_retnet(cmd + (dir / "fla").string() + " --dtype f8", 60);
    EXPECT_TRUE(retnet::test::fails_cleanly(bad, "--dtype")) << cmd << ": " << bad.err;
  }
  fs::remove_all(dir);
}
