// `retnet bench speculative --benefit` end to end on a tiny model (seconds): both prompt kinds in
// every mode have finite positive figures, greedy speculative texts are plain decoding's, the
// model drafting for itself keeps its drafts, and options of the other mode are refused by name.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct BenefitFiles {
  fs::path dir, model, corpus;
};

BenefitFiles benefit_files(const std::string& name) {
  BenefitFiles f;
  f.dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::create_directories(f.dir);
  std::ofstream(f.dir / "tiny.json")
      << R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 48, "decoder_retention_heads": 4,
            "decoder_ffn_embed_dim": 40, "decoder_layers": 2, "vocab_size": 256,
            "recurrent_chunk_size": 8})";
  f.model = f.dir / "tiny.safetensors";
  auto r = retnet::test::run_retnet("init --config " + (f.dir / "tiny.json").string() + " -o " +
                                    f.model.string() + " -s 5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Lines of a play: a speaker, then words, so that prompts start at line starts.
  f.corpus = f.dir / "corpus.txt";
  std::ofstream text(f.corpus);
  for (int i = 0; i < 120; ++i)
    text << "SPEAKER " << i % 7 << ":\nThe words of line " << i << ", and more words after them "
         << "to fill it.\n\n";
  return f;
}

}  // namespace

TEST(BenchSpeculativeBenefit, QuickRunWritesEveryFigure) {
  const BenefitFiles f = benefit_files("retnet_bench_spec_benefit");
  const fs::path out = f.dir / "benefit.json";
  // The model drafts for itself: its greedy drafts are what decoding picks.
  auto r = retnet::test::run_retnet(
      "bench speculative --benefit --target " + f.model.string() + " --draft " + f.model.string() +
          " --data " + f.corpus.string() +
          " --prompts 2 --prompt-bytes 64 -n 24 --reps 3 -t 1 --json " + out.string(),
      120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json res = json::parse(std::ifstream(out));
  ASSERT_EQ(res["targets"].size(), 1u);
  const json& t = res["targets"][0];
  EXPECT_EQ(t["greedy_texts_differing_from_plain"].get<int>(), 0) << t.dump();
  ASSERT_EQ(t["prompts"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const json& p = t["prompts"][i];
    EXPECT_EQ(p["kind"].get<std::string>(), i < 2 ? "plain" : "copy");
    EXPECT_EQ(p["prompt"].get<std::string>().find("Once more") != std::string::npos, i >= 2);
    // A prompt's ratio pairs each repetition's runs: the median of plain's time over the mode's.
    const std::vector<double> plain = p["modes"]["plain"]["decode_s"].get<std::vector<double>>();
    ASSERT_EQ(plain.size(), 3u);
    for (const char* mode : {"plain", "lookup", "draft"}) {
      const std::vector<double> s = p["modes"][mode]["decode_s"].get<std::vector<double>>();
      ASSERT_EQ(s.size(), 3u);
      std::vector<double> ratios = {plain[0] / s[0], plain[1] / s[1], plain[2] / s[2]};
      std::sort(ratios.begin(), ratios.end());
      EXPECT_NEAR(p["modes"][mode]["ratio_to_plain"].get<double>(), ratios[1], 1e-9 * ratios[1])
          << mode;
    }
  }
  ASSERT_EQ(t["kinds"].size(), 2u);
  for (const json& kind : t["kinds"]) {
    ASSERT_EQ(kind["modes"].size(), 3u) << kind.dump();
    for (const json& m : kind["modes"]) {
      for (const char* key : {"tokens_per_s", "ratio_to_plain", "min_prompt_ratio"}) {
        const double v = m[key].get<double>();
        EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " " << m.dump();
      }
      const double rate = m["acceptance_rate"].get<double>();
      EXPECT_TRUE(rate >= 0 && rate <= 1) << m.dump();
      const std::string mode = m["mode"].get<std::string>();
      if (mode == "plain") {
        EXPECT_EQ(m["checks"].get<int>(), 0);
      }
      // (A draft's step and the check's pass round differently: a near tie may still differ.)
      if (mode == "draft") {
        EXPECT_GT(m["checks"].get<int>(), 0);
        EXPECT_GE(rate, 0.9) << m.dump();
        EXPECT_GT(m["mean_accepted_length"].get<double>(), 1.0) << m.dump();
      }
    }
  }
  std::error_code ec;
  fs::remove_all(f.dir, ec);
}

TEST(BenchSpeculativeBenefit, RefusesOptionsOfTheOtherMode) {
  const BenefitFiles f = benefit_files("retnet_bench_spec_benefit_bad");
  auto mixed = retnet::test::run_retnet(
      "bench speculative --benefit --target " + f.model.string() + " --k 4", 60);
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.err.find("--k"), std::string::npos) << mixed.err;
  auto alone = retnet::test::run_retnet("bench speculative --target " + f.model.string(), 60);
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--benefit"), std::string::npos) << alone.err;
  auto none = retnet::test::run_retnet("bench speculative --benefit", 60);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--target"), std::string::npos) << none.err;
  auto small = retnet::test::run_retnet("bench speculative --benefit --target " + f.model.string() +
                                            " --data " + f.corpus.string() + " --prompt-bytes 4096",
                                        60);
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.err.find("--data"), std::string::npos) << small.err;
  for (const auto* r : {&mixed, &alone, &none, &small}) EXPECT_FALSE(r->signaled);
  std::error_code ec;
  fs::remove_all(f.dir, ec);
}

// `retnet bench serve --draft-model`: rounds with the server's draft model alternate with rounds
// whose requests turn it off, each row with its figures and no failed request, and the marked
// rows with their speed against the unmarked ones.
TEST(BenchSpeculativeBenefit, ServeAlternatesRoundsWithTheDraftModel) {
  const BenefitFiles f = benefit_files("retnet_bench_spec_serve");
  const fs::path out = f.dir / "serve.json";
  auto r = retnet::test::run_retnet("bench serve -m " + f.model.string() + " --draft-model " +
                                        f.model.string() + " --streams 1,2 -n 8 --reps 1 -t 1 " +
                                        "--json " + out.string(),
                                    120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json res = json::parse(std::ifstream(out));
  ASSERT_EQ(res["results"].size(), 4u) << res.dump();
  for (size_t i = 0; i < 4; ++i) {
    const json& x = res["results"][i];
    EXPECT_EQ(x["draft_model"].get<bool>(), i % 2 == 1);
    EXPECT_EQ(x["failed_requests"].get<int>(), 0);
    const double v = x["tokens_per_s"]["median"].get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << x.dump();
    // A marked row holds its speed against the unmarked row's rounds (one round: their ratio).
    EXPECT_EQ(x.contains("ratio_to_unmarked"), i % 2 == 1) << x.dump();
    if (i % 2 == 1) {
      const double against = res["results"][i - 1]["tokens_per_s"]["median"].get<double>();
      EXPECT_NEAR(x["ratio_to_unmarked"]["median"].get<double>(), v / against, 1e-9 * v / against);
    }
  }
  auto bad = retnet::test::run_retnet("bench serve -m " + f.model.string() + " --draft-model " +
                                          f.model.string() + R"( --speculative '{"lookup": 2}')",
                                      60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--draft-model"), std::string::npos) << bad.err;
  std::error_code ec;
  fs::remove_all(f.dir, ec);
}
