#pragma once
// A short training run's inputs: a 50 kB slice of the bundled corpus, a tiny config and options
// (20 steps of 4 x 48 tokens, quiet), in a fresh directory removed afterwards.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "retnet/train/trainer.h"
#include "test_helpers.h"

namespace retnet::test {

// A small slice of the bundled corpus and a tiny config.
struct TrainFixture {
  std::filesystem::path dir;
  std::string data, config;
  explicit TrainFixture(const std::string& name) : dir(fresh_temp_dir("train_" + name)) {
    std::ifstream in(std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    data = (dir / "data.txt").string();
    std::ofstream(data, std::ios::binary) << text.substr(0, 50000);
    config = (dir / "config.json").string();
    std::ofstream(config) << R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "decoder_layers": 2})";
  }
  ~TrainFixture() { std::filesystem::remove_all(dir); }
  TrainOptions options(const std::string& out) const {
    TrainOptions o;
    o.data = data;
    o.config_path = config;
    o.out_dir = (dir / out).string();
    o.steps = 20;
    o.batch = 4;
    o.seq = 48;
    o.optimizer.warmup_steps = 5;
    o.eval_interval = 1000;
    o.eval_tokens = 2048;
    o.quiet = true;
    return o;
  }
};

}  // namespace retnet::test
