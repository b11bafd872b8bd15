// `retnet quantize` end to end: the file it writes serves info (bits per weight), generate (with
// state files), logits, eval and bench model; --dtype q* quantises at load; training, quantising
// again and a second type are refused with clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "test_helpers.h"

using retnet::test::fails_cleanly;
using retnet::test::run_retnet;
namespace fs = std::filesystem;

TEST(QuantCli, QuantisedFileServesEveryCommand) {
  const fs::path dir = retnet::test::fresh_temp_dir("quant_cli");
  const std::string config = retnet::test::write_file(
      dir / "config.json",
      R"({"decoder_embed_dim": 64, "decoder_value_embed_dim": 64, "decoder_retention_heads": 2,
          "decoder_ffn_embed_dim": 128, "decoder_layers": 2, "vocab_size": 256})");
  const std::string f32 = (dir / "f32.safetensors").string();
  ASSERT_EQ(run_retnet("init --config " + config + " --out " + f32).exit_code, 0);
  const std::string q4 = (dir / "q4.safetensors").string();
  auto r = run_retnet("quantize " + f32 + " " + q4 + " --type q4_0 --keep-head f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto info = run_retnet("info " + q4 + " --json");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["quantization"]["type"], "q4_0");
  EXPECT_EQ(j["quantization"]["bits_per_weight"], 4.5);
  EXPECT_EQ(j["quantization"]["lm_head"], "f32");
  EXPECT_LT(j["quantization"]["bits_per_parameter"].get<double>(), 32.0);
  EXPECT_GT(j["quantization"]["weight_bytes"].get<int64_t>(), 0);
  auto info_text = run_retnet("info " + f32 + " --dtype q8_0");
  ASSERT_EQ(info_text.exit_code, 0) << info_text.err;
  EXPECT_NE(info_text.out.find("projections in q8_0 (8.5 bits per weight"), std::string::npos)
      << info_text.out;

  // generate with a state file written and resumed, logits, eval, on the quantised file.
  const std::string state = (dir / "s.state").string();
  r = run_retnet("generate -m " + q4 + " -p hello -n 8 --temp 0 --state-out " + state);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_retnet("generate -m " + q4 + " -p '' -n 4 --temp 0 --state-in " + state);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // A state from the float32 model is another model's.
  EXPECT_TRUE(fails_cleanly(run_retnet("generate -m " + f32 + " -p '' -n 2 --state-in " + state),
                            "another model"));
  r = run_retnet("logits -m " + q4 + " --tokens 1,2,3 --out " + (dir / "l.npy").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = retnet::test::write_file(dir / "t.txt", std::string(400, 'a') + "b");
  r = run_retnet("eval -m " + q4 + " --data " + text + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["bits_per_byte"].get<double>(), 0);
  // --dtype at load on the float32 file, and bench model comparing dtypes in one run.
  r = run_retnet("generate -m " + f32 + " --dtype q4_1 -p hello -n 4 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bench = (dir / "b.json").string();
  r = run_retnet("bench model -m " + f32 + " --probe-mib 16 --dtype f32,q8_0 --prefill 8 " +
                     "--prefill 80 --decode 4 --reps 1 --json " + bench,
                 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(bench);
  const auto b = nlohmann::json::parse(in);
  ASSERT_EQ(b["runs"].size(), 2u);
  EXPECT_EQ(b["runs"][1]["model"]["dtype"], "q8_0");
  EXPECT_GT(b["runs"][1]["decode"]["speedup_over_first"].get<double>(), 0);
  // q8_0 reads about 8.5/32 of f32's bytes per token (plus one f32 embedding row, and the f32
  // panels' padding).
  const double ratio = b["runs"][1]["decode"]["bytes_per_token"].get<double>() /
                       b["runs"][0]["decode"]["bytes_per_token"].get<double>();
  EXPECT_NEAR(ratio, 8.5 / 32, 0.03);

  // Refused: quantising again, another dtype on a quantised file, training from it, bad types.
  EXPECT_TRUE(fails_cleanly(run_retnet("quantize " + q4 + " " + (dir / "x").string() +
                                       " --type q8_0"),
                            "already quantised"));
  EXPECT_TRUE(fails_cleanly(run_retnet("generate -m " + q4 + " --dtype bf16 -p hi -n 2"),
                            "quantised (q4_0)"));
  EXPECT_TRUE(fails_cleanly(run_retnet("quantize " + f32 + " " + (dir / "y").string() +
                                       " --type q3_k"),
                            "q3_k"));
  EXPECT_TRUE(fails_cleanly(run_retnet("train --data " + text + " --init-from " + q4 + " --out " +
                                       (dir / "run").string() + " --steps 1 --batch 1 --seq 8"),
                            "quantised"));
  fs::remove_all(dir);
}
