// `retnet bench serve` end to end on a tiny model (a few seconds): every figure of each stream
// count is in its JSON, finite and positive, with no failed request; a short soak passes; a bad
// stream count is refused naming the option.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path serve_tiny_model(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "tiny.json")
      << R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 48, "decoder_retention_heads": 4,
            "decoder_ffn_embed_dim": 40, "decoder_layers": 2, "vocab_size": 256,
            "recurrent_chunk_size": 8})";
  const fs::path model = dir / "tiny.safetensors";
  auto r = retnet::test::run_retnet("init --config " + (dir / "tiny.json").string() + " -o " +
                                    model.string() + " -s 5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return model;
}

}  // namespace

TEST(BenchServe, QuickRunWritesEveryFigure) {
  const fs::path dir =
      fs::temp_directory_path() / ("retnet_bench_serve_" + std::to_string(getpid()));
  const fs::path model = serve_tiny_model(dir), out = dir / "serve.json";
  auto r = retnet::test::run_retnet("bench serve -m " + model.string() +
                                        " --streams 1,3 -n 8 --reps 2 -t 1 --json " + out.string() +
                                        R"( --response-format '{"type": "json_object"}')" +
                                        R"( --speculative '{"lookup": 2}')",
                                    120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json res = json::parse(std::ifstream(out));
  // Each stream count without and then with the response_format and speculation.
  ASSERT_EQ(res["results"].size(), 4u) << res.dump();
  for (size_t i = 0; i < 4; ++i) {
    const json& x = res["results"][i];
    EXPECT_EQ(x["streams"].get<int>(), i < 2 ? 1 : 3);
    EXPECT_EQ(x["response_format"].get<bool>(), i % 2 == 1);
    EXPECT_EQ(x["speculative"].get<bool>(), i % 2 == 1);
    EXPECT_EQ(x["failed_requests"].get<int>(), 0);
    for (const char* key : {"per_stream_tokens_per_s", "ttft_ms_p50", "ttft_ms_p95",
                            "ratio_to_generate", "ratio_to_generate_end_to_end",
                            "server_rss_bytes"}) {
      const double v = x[key].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " " << v;
    }
    for (const char* key : {"tokens_per_s", "generate_batch_tokens_per_s",
                            "generate_end_to_end_tokens_per_s"}) {
      const double v = x[key]["median"].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " " << v;
    }
    // 0 where no stream sent two chunks (8 tokens of a random model may come as one).
    for (const char* key : {"decode_tokens_per_s", "decode_ratio_to_generate"}) {
      const double v = x[key]["median"].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << key << " " << v;
    }
    EXPECT_LE(x["ttft_ms_p50"].get<double>(), x["ttft_ms_p95"].get<double>());
  }
  EXPECT_TRUE(res["machine"].is_object() && res["commit"].is_string());

  r = retnet::test::run_retnet("bench serve -m " + model.string() + " --streams 1,0", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--streams"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(BenchServe, ShortSoakEndsWithEverySlotFree) {
  const fs::path dir =
      fs::temp_directory_path() / ("retnet_bench_soak_" + std::to_string(getpid()));
  const fs::path model = serve_tiny_model(dir), out = dir / "soak.json";
  // AddressSanitizer's quarantine holds freed memory (up to 256 MiB): a 3 s soak grew 60% there.
  const std::string rss_tolerance = retnet::test::kAddressSanitizer ? "2" : "0.5";
  auto r = retnet::test::run_retnet("bench serve -m " + model.string() +
                                        " --soak 3 --soak-clients 4 -n 16 -t 1 --rss-tolerance " +
                                        rss_tolerance + " --json " + out.string(),
                                    120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json s = json::parse(std::ifstream(out))["soak"];
  EXPECT_GT(s["completed"].get<int>(), 0);
  EXPECT_EQ(s["failed"].get<int>(), 0);
  EXPECT_TRUE(s["slots_idle_at_end"].get<bool>());
  EXPECT_EQ(s["exit_status"].get<int>(), 0);
  fs::remove_all(dir);
}

// A 4-turn chat: with the cache on, every turn after the second restores a prefix and reads only a
// part of its prompt; with it off nothing is restored; the replies are the same text.
TEST(BenchServe, ChatTurnsRestoreTheConversationFromTheCache) {
  const fs::path dir =
      fs::temp_directory_path() / ("retnet_bench_chat_" + std::to_string(getpid()));
  const fs::path model = serve_tiny_model(dir), out = dir / "chat.json";
  auto r = retnet::test::run_retnet("bench serve -m " + model.string() +
                                        " --chat-turns 4 -n 6 -t 1 --chat-cache-mib 16 --json " +
                                        out.string(),
                                    120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json res = json::parse(std::ifstream(out))["results"];
  ASSERT_EQ(res.size(), 4u) << res.dump();
  for (size_t t = 0; t < res.size(); ++t) {
    const json& x = res[t];
    EXPECT_TRUE(x["same_text"].get<bool>()) << t;
    EXPECT_EQ(x["cached_tokens_cache_off"].get<int64_t>(), 0) << t;
    if (t >= 1) {  // the earlier prompt ran past a chunk boundary (chunk 8)
      EXPECT_GT(x["cached_tokens_cache_on"].get<int64_t>(), 0) << t;
      EXPECT_LT(x["cached_tokens_cache_on"].get<int64_t>(), x["prompt_tokens"].get<int64_t>());
      EXPECT_GT(x["prompt_tokens"].get<int64_t>(), res[t - 1]["prompt_tokens"].get<int64_t>());
    }
  }
  // Bad values are refused naming the option.
  for (const std::string bad : {"--chat-turns 1", "--chat-cache-mib 0", "--server-threads -1",
                                "--response-format [1]", "--response-format {",
                                "--speculative 3"}) {
    r = retnet::test::run_retnet("bench serve -m " + model.string() + " " + bad, 60);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find(bad.substr(0, bad.find(' '))), std::string::npos) << bad << ": " << r.err;
  }
  fs::remove_all(dir);
}
