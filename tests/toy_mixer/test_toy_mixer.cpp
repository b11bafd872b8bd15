// The toy mixer (toy_mixer.cpp), registered by its one line, with its own option, through every
// command the registry drives: init, info, train, eval, generate and logits in each form it
// declares (export refuses it cleanly). Its numerics (forms agree, gradients, states, files) are
// the family's tests of test_mixers.cpp, linked in here, where the registry lists it.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "retnet/core/error.h"
#include "retnet/core/npy.h"
#include "test_helpers.h"
#include "test_support.h"
#include "toy_mixer.h"

namespace fs = std::filesystem;
using retnet::test::run_retnet;

TEST(ToyMixer, IsRegisteredByItsOneLine) {
  EXPECT_EQ(&retnet::find_mixer("toy"), &retnet::toy::toy_mixer_spec());
  EXPECT_NE(retnet::mixer_names().find(", toy"), std::string::npos) << retnet::mixer_names();
  EXPECT_TRUE(retnet::test::throws_error_naming(
      [] { retnet::register_mixer(retnet::toy::toy_mixer_spec()); }, {"'toy' is already"}));
}

// The reference backend computes the built-in mixers from their definitions; it has none of a
// mixer registered from outside the library, and says so rather than run the mixer's own code.
TEST(ToyMixer, TheReferenceBackendRefusesItByName) {
  retnet::Model m = retnet::Model::init(
      retnet::Config::from_json(R"({"decoder_embed_dim": 16, "decoder_value_embed_dim": 24,
          "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "decoder_layers": 1,
          "vocab_size": 30, "mixer": "toy"})"),
      3);
  m.use_backend("reference");
  EXPECT_TRUE(retnet::test::throws_error_naming(
      [&] { retnet::test::model_logits(m, {1, 2, 3}, 1, retnet::Form::Parallel); },
      {"reference backend", "built-in mixers", "'toy'"}));
}

TEST(ToyMixer, EveryCommandRunsIt) {
  const fs::path dir = retnet::test::fresh_temp_dir("toy_mixer_cli");
  const std::string config = retnet::test::write_file(
      dir / "toy.json",
      R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 48, "decoder_retention_heads": 2,
          "decoder_ffn_embed_dim": 64, "decoder_layers": 2, "vocab_size": 256,
          "recurrent_chunk_size": 8, "mixer": "toy", "toy_decay": 0.5})");
  std::string text;
  for (int i = 0; i < 120; ++i) text += "the toy mixer sums its keys and values, decayed. ";
  const std::string data = retnet::test::write_file(dir / "corpus.txt", text);

  const std::string init_model = (dir / "init.safetensors").string();
  auto r = run_retnet("init --config " + config + " -o " + init_model, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  r = run_retnet("info " + init_model + " --json", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info["config"]["mixer"], "toy") << r.out;
  // Its option, read, checked and written by the mixer's own code.
  EXPECT_EQ(info["config"]["toy_decay"], 0.5) << r.out;
  const std::string bad = retnet::test::write_file(
      dir / "bad.json", R"({"decoder_layers": 1, "mixer": "toy", "toy_decay": 1.5})");
  r = run_retnet("init --config " + bad + " -o " + (dir / "bad.safetensors").string(), 300);
  EXPECT_TRUE(retnet::test::fails_cleanly(r, "'toy_decay' must be a number in (0, 1)")) << r.err;
  // A state of value_dim floats per layer: 2 layers x 48 floats x 4 bytes.
  EXPECT_EQ(info["state_bytes_per_sequence"], 2 * 48 * 4) << r.out;

  const fs::path run = dir / "run";
  r = run_retnet("train --data " + data + " --config " + config + " --out " + run.string() +
                     " --steps 30 --batch 4 --seq 32 --lr 0.01 --warmup 2 --log-interval 1"
                     " --eval-interval 1000 --eval-tokens 512 --checkpoint-interval 1000 -t 1",
                 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> losses;
  std::ifstream metrics(run / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"]);
  }
  ASSERT_EQ(losses.size(), 30u);
  for (double l : losses) ASSERT_TRUE(std::isfinite(l)) << l;
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "training did not lower the loss";

  const std::string model = (run / "model.safetensors").string();
  r = run_retnet("generate -m " + model + " -p 'the toy ' -n 24 --temperature 0 -t 1", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.out.size(), std::string("the toy ").size()) << r.out;

  // eval's forms agree; a Hugging Face layout, which describes no toy layers, refuses it by name.
  std::vector<double> eval_losses;
  for (const char* form : {"parallel", "chunkwise"}) {
    r = run_retnet("eval -m " + model + " --data " + data + " --form " + form + " --json -t 1",
                   300);
    ASSERT_EQ(r.exit_code, 0) << form << ": " << r.err;
    eval_losses.push_back(nlohmann::json::parse(r.out)["loss"]);
    ASSERT_TRUE(std::isfinite(eval_losses.back())) << r.out;
  }
  EXPECT_NEAR(eval_losses[1], eval_losses[0], 1e-5 * eval_losses[0]);
  r = run_retnet("export " + model + " --format fla -o " + (dir / "hf").string(), 300);
  EXPECT_TRUE(retnet::test::fails_cleanly(r, "'toy'"));

  // Every form the spec declares gives the parallel form's logits.
  const std::string out = (dir / "logits.npy").string();
  std::vector<std::vector<float>> logits;
  for (const char* mode : {"parallel", "recurrent", "chunkwise", "chunkwise --chunk 3"}) {
    r = run_retnet("logits -m " + model + " --tokens 116,104,101,32,116,111,121,32,109,105,120" +
                       " -t 1 --mode " + mode + " -o " + out,
                   300);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    const retnet::NpyArray a = retnet::read_npy(out);
    ASSERT_EQ(a.shape, (std::vector<int64_t>{11, 256})) << mode;
    logits.push_back(a.data);
  }
  for (size_t i = 1; i < logits.size(); ++i)
    EXPECT_TRUE(retnet::test::close(logits[i], logits[0], 1e-5)) << "form " << i;
  r = run_retnet("logits -m " + model + " --tokens 1,2 --mode scan -o " + out, 300);
  EXPECT_TRUE(retnet::test::fails_cleanly(r, "scan")) << r.err;
  fs::remove_all(dir);
}
