// `retnet bench decode --quick` end to end (about 3 s on 2 cores): every figure is in its JSON with
// finite, positive numbers, the ceiling is consistent with its parts, and the saved position states
// it works from are removed afterwards.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

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
