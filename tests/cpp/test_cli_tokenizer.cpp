// The tokenizer end to end through the `retnet` binary: `tokenizer train/encode/decode`, a short
// `train --tokenizer` whose model and checkpoints record the tokenizer, `eval` with no tokenizer
// flag (bits per byte over the text's bytes), and bad input.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/safetensors.h"
#include "retnet/text/tokenizer.h"
#include "retnet/train/data.h"
#include "test_helpers.h"
#include "tokenizer_fixture.h"

using namespace retnet;
using namespace retnet::test;
namespace fs = std::filesystem;

namespace {

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::fresh_temp_dir("tok_cli");
    data = test::write_file(dir / "data.txt", test::corpus_prefix(60000));
    // No vocab_size: it comes from the tokenizer.
    config = test::write_file(dir / "tiny.json",
                              R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "decoder_layers": 2})");
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string train_args(const std::string& tokenizer, const std::string& out) const {
    return "train --data " + data + " --tokenizer " + tokenizer + " --config " + config +
           " --out " + out +
           " --steps 12 --batch 4 --seq 32 --warmup 2 --eval-interval 1000 --eval-tokens 512 "
           "--checkpoint-interval 6";
  }
  fs::path dir;
  std::string data, config;
};

}  // namespace

TEST_F(TokenizerCli, TrainEncodeDecode) {
  const std::string model = (dir / "tok.model").string();
  auto r = run_retnet("tokenizer train --data " + data + " --vocab 350 --out " + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("350 pieces"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");  // SentencePiece's log stays off without --verbose
  EXPECT_EQ(load_tokenizer(model)->vocab_size(), 350);
  const std::string text = "Thou art w\xC3\xB6rthy, \xE2\x86\x92 good sir";
  auto enc = run_retnet("tokenizer encode --tokenizer " + model + " --text '" + text + "'");
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  auto dec = run_retnet("tokenizer decode --tokenizer " + model + " --tokens " + enc.out);
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, text + "\n");
  auto bytes = run_retnet("tokenizer encode --text 'Hi!'");
  EXPECT_EQ(bytes.out, "72,105,33\n");
  for (const char* sub : {"tokenizer", "tokenizer train", "tokenizer encode", "tokenizer decode"}) {
    auto h = run_retnet(std::string(sub) + " --help");
    EXPECT_EQ(h.exit_code, 0) << sub;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST_F(TokenizerCli, TrainedModelCarriesItsTokenizerIntoEval) {
  const std::string tok = test::test_tokenizer_path();
  const fs::path run = dir / "run";
  auto r = run_retnet(train_args(tok, run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string model = (run / "model.safetensors").string();
  // The model file and its checkpoints record the tokenizer; its vocabulary is the tokenizer's.
  auto original = load_tokenizer(tok);
  for (const fs::path& file : {fs::path(model), run / "checkpoint-00000006.safetensors",
                               run / "checkpoint-00000012.safetensors"}) {
    ASSERT_TRUE(fs::exists(file)) << file;
    EXPECT_EQ(tokenizer_fingerprint(*load_model_tokenizer(file.string())),
              tokenizer_fingerprint(*original))
        << file;
  }
  const auto info = nlohmann::json::parse(run_retnet("info " + model + " --json").out);
  EXPECT_EQ(info["config"]["vocab_size"], 400);
  EXPECT_EQ(info["tokenizer"]["kind"], "sentencepiece");
  // The corpus was tokenized into the cache once; eval needs no tokenizer flag.
  EXPECT_TRUE(fs::exists(token_cache_path(data, *original)));
  auto e = run_retnet("eval -m " + model + " --data " + data + " --tail 0.1 --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["tokenizer"], "sentencepiece");
  const double loss = j["loss"], bpb = j["bits_per_byte"];
  const int64_t tokens = j["tokens"], bytes = j["bytes"];
  // Bits per byte is the nats of all predictions over the bytes they cover: the validation text
  // (the last 6000 bytes) less the first token's.
  EXPECT_LE(bytes, 6000);
  EXPECT_GE(bytes, 6000 - 16);
  EXPECT_NEAR(bpb, loss * tokens / std::log(2.0) / bytes, 1e-9 * bpb);
  EXPECT_LT(bpb, loss / std::log(2.0));  // more than one byte per token
  EXPECT_GT(bpb, 1.0);                   // 12 steps learn little
  EXPECT_LT(bpb, 8.0);
}

TEST_F(TokenizerCli, ResumeWithSentencePieceIsExact) {
  // 12 steps straight; then the same run cut back to its step-6 checkpoint and resumed: steps
  // 7-12 must give the same losses, bit for bit (the batches come from the token cache).
  const std::string tok = test::test_tokenizer_path();
  const fs::path run = dir / "run";
  ASSERT_EQ(run_retnet(train_args(tok, run.string())).exit_code, 0);
  auto losses = [&] {
    std::vector<double> l;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) l.push_back(j["loss"]);
    }
    return l;
  };
  const auto straight = losses();
  ASSERT_EQ(straight.size(), 12u);
  fs::remove(run / "checkpoint-00000012.safetensors");
  auto r = run_retnet(train_args(tok, run.string()) + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The resume cuts metrics.jsonl back to step 6 and writes steps 7-12 again.
  const auto all = losses();
  ASSERT_EQ(all.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(all[i], straight[i]) << "step " << 1 + i;
}

TEST_F(TokenizerCli, ByteModelBitsPerByteIsLossOverLn2) {
  const fs::path run = dir / "bytes";
  auto r = run_retnet(train_args("bytes", run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto e = run_retnet("eval -m " + (run / "model.safetensors").string() + " --data " + data +
                      " --tail 0.1 --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["tokenizer"], "bytes");
  EXPECT_EQ(j["tokens"], 5999);
  EXPECT_EQ(j["bytes"], 5999);
  EXPECT_NEAR(j["bits_per_byte"].get<double>(), j["loss"].get<double>() / std::log(2.0), 1e-12);
}

TEST_F(TokenizerCli, BadInputFailsCleanly) {
  const std::string tok = test::test_tokenizer_path();
  const std::string truncated = (dir / "truncated.model").string();
  {
    std::ifstream in(tok, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string vocab256 = (dir / "v256.json").string();
  std::ofstream(vocab256) << R"({"decoder_embed_dim": 32, "decoder_retention_heads": 2,
    "decoder_value_embed_dim": 64, "decoder_ffn_embed_dim": 64, "decoder_layers": 1,
    "vocab_size": 256})";
  const std::string out = (dir / "out").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {train_args((dir / "missing.model").string(), out), "does not exist"},
      {train_args(truncated, out), "not a SentencePiece model"},
      {train_args(data, out), "not a SentencePiece model"},  // a text file
      {"train --data " + data + " --tokenizer " + tok + " --config " + vocab256 +
           " --steps 2 --out " + out,
       "vocab_size 256 but the tokenizer"},
      {"tokenizer train --data " + data + " --vocab 100 --out " + (dir / "x.model").string(),
       "smaller than required_chars"},
      {"tokenizer train --data " + (dir / "nope.txt").string() + " --vocab 500 --out x.model",
       "does not exist"},
      {"tokenizer train --data " + data + " --vocab 500 --out /nonexistent/dir/x.model",
       "cannot create"},
      {"tokenizer encode --tokenizer " + truncated + " --text hi", "not a SentencePiece model"},
      {"tokenizer decode --tokenizer " + tok + " --tokens 1,400", "out of range"},
      {"tokenizer encode --tokenizer " + tok, "give --text or --file"},
  };
  for (const auto& [args, expected] : cases) {
    auto r = run_retnet(args);
    EXPECT_TRUE(fails_cleanly(r, expected)) << args;
  }
  // Resuming with another tokenizer than the checkpoint's is refused.
  const std::string run = (dir / "run").string();
  ASSERT_EQ(run_retnet(train_args(tok, run)).exit_code, 0);
  auto bpe = test::test_tokenizer_path(400, "bpe");
  EXPECT_TRUE(fails_cleanly(run_retnet(train_args(bpe, run) + " --resume"), "other settings"));
}
