// `retnet bench paper` end to end at its smallest scope (the hidden --smoke: two lengths, two
// batches, two head counts, one repetition; about 5 s on 2 cores): results.json holds every
// figure, every point is either measured with finite numbers or skipped with a reason, and the
// headline ratios are there.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every number under j is finite; returns how many there are.
int count_finite(const json& j, const std::string& where) {
  int n = 0;
  if (j.is_number()) {
    EXPECT_TRUE(std::isfinite(j.get<double>())) << where;
    return 1;
  }
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) n += count_finite(it.value(), where + "/" + it.key());
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) n += count_finite(j[i], where + "/" + std::to_string(i));
  return n;
}

// A point: a measurement (numbers) or {"status": "skipped", "reason": ...}.
void check_point(const json& p, const std::string& where) {
  ASSERT_TRUE(p.is_object() || p.is_number()) << where;
  if (p.is_object() && p.contains("status")) {
    EXPECT_EQ(p["status"], "skipped") << where;
    EXPECT_FALSE(p.value("reason", "").empty()) << where;
    return;
  }
  EXPECT_GT(count_finite(p, where), 0) << where;
}

}  // namespace

TEST(BenchPaper, SmokeWritesEveryFigure) {
  const fs::path dir = fs::temp_directory_path() / ("retnet_bench_paper_" + std::to_string(getpid()));
  fs::remove_all(dir);
  auto r = retnet::test::run_retnet("bench paper --smoke --no-plot --threads 2 --out " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("headline ratios"), std::string::npos) << r.out;
  std::ifstream in(dir / "results.json");
  ASSERT_TRUE(in.good());
  const json res = json::parse(in);
  count_finite(res, "");
  EXPECT_FALSE(res["git_commit"].get<std::string>().empty());
  EXPECT_FALSE(res["machine"]["cpu"].get<std::string>().empty());
  EXPECT_GT(res["machine"]["memory_total_bytes"].get<double>(), 0);
  EXPECT_EQ(res["threads"], 2);
  EXPECT_NEAR(res["configs"]["retnet"]["parameters"].get<double>(),
              res["configs"]["transformer"]["parameters"].get<double>(),
              0.01 * res["configs"]["retnet"]["parameters"].get<double>());

  const json& f = res["figures"];
  for (const char* model : {"retnet", "transformer"})
    for (const auto& T : f["inference_memory"]["lengths"]) {
      const json& p = f["inference_memory"][model][std::to_string(T.get<int>())];
      check_point(p, std::string("memory/") + model);
      if (!p.contains("status")) {
        EXPECT_GT(p["peak_rss_bytes"]["median"].get<double>(), 0);
        EXPECT_GT(p["weights_plus_state_bytes"].get<double>(), p["weights_bytes"].get<double>());
      }
    }
  // RetNet's state does not grow; the transformer's cache does.
  const auto& lengths = f["inference_memory"]["lengths"];
  const std::string first = std::to_string(lengths.front().get<int>()),
                    last = std::to_string(lengths.back().get<int>());
  EXPECT_EQ(f["inference_memory"]["retnet"][first]["state_bytes"],
            f["inference_memory"]["retnet"][last]["state_bytes"]);
  EXPECT_LT(f["inference_memory"]["transformer"][first]["state_bytes"].get<double>(),
            f["inference_memory"]["transformer"][last]["state_bytes"].get<double>());

  for (const char* s : {"retnet@8192", "transformer@8192", "transformer@1024"})
    for (const auto& B : f["decode"]["batches"]) {
      const json& p = f["decode"]["series"][s][std::to_string(B.get<int>())];
      check_point(p, std::string("decode/") + s);
      if (!p.contains("status")) {
        EXPECT_GT(p["latency_ms"]["median"].get<double>(), 0);
        EXPECT_GT(p["tokens_per_s"]["median"].get<double>(), 0);
      }
    }
  for (const char* s : {"retention-parallel", "retention-chunkwise", "attention-tiled"})
    for (const auto& T : f["training"]["lengths"])
      check_point(f["training"]["series"][s][std::to_string(T.get<int>())],
                  std::string("training/") + s);
  for (const char* form : {"parallel", "recurrent", "chunkwise", "scan"})
    for (const auto& H : f["heads_sweep"]["heads"]) {
      const json& p = f["heads_sweep"]["forms"][form][std::to_string(H.get<int>())];
      check_point(p, std::string("heads/") + form);
      EXPECT_GT(p["median"].get<double>(), 0);
    }
  ASSERT_TRUE(res["ratios"].is_array());
  EXPECT_GE(res["ratios"].size(), 5u);
  for (const auto& ratio : res["ratios"]) EXPECT_GT(ratio["retnet_advantage"].get<double>(), 0);
  fs::remove_all(dir);
}

TEST(BenchPaper, ProbeIsHiddenAndPrintsOneJsonLine) {
  auto help = retnet::test::run_retnet("bench --help");
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("paper"), std::string::npos);
  EXPECT_EQ(help.out.find("paper-probe"), std::string::npos) << help.out;
  auto r = retnet::test::run_retnet("bench paper-probe --what memory --mixer retention --length 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0);
  EXPECT_EQ(j["synthetic_cache"], false);
}
