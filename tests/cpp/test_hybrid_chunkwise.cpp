// The chunkwise form of models with attention layers (attention alone, and hybrids of retention
// and attention): logits equal the parallel form's for chunks that divide the length and that
// don't, for one token, and for a prompt continued after a chunkwise prefill; chunkwise training
// gives the parallel form's gradients; sequence parallel training is refused naming the layer.
// End to end: `retnet eval` (its default form) and `retnet logits --mode chunkwise` on an fla
// hybrid directory and on a hybrid model made with `retnet init`; `retnet train --form chunkwise`
// on a hybrid config, and `--seq-parallel` refused naming the attention layer.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/npy.h"
#include "retnet/retnet.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

const char* kAttentionLayers = R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 32,
  "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 48, "decoder_layers": 2,
  "vocab_size": 64, "mixer": "attention"})";

// Retention around attention layers with kv heads, q/k/v biases and a sliding window.
const char* kRetentionAttention = R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
  "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 48, "decoder_layers": 4,
  "vocab_size": 64, "rotary": "half_split", "recurrent_chunk_size": 8,
  "mixer": ["retention", {"mixer": "attention", "heads": 4, "kv_heads": 2, "qkv_bias": true,
                          "value_dim": 32},
            "retention", {"mixer": "attention", "heads": 2, "window_size": 5}]})";

// A model whose biases and norms are not at their initial values, so every tensor matters.
Model perturbed_attention_model(const char* json, uint64_t seed) {
  Model m = Model::init(Config::from_json(json), seed);
  auto noise = test::random_vector(m.params().size(), seed + 1, 0.05);
  for (size_t i = 0; i < m.params().size(); ++i) m.params().data()[i] += noise[i];
  return m;
}

std::vector<int32_t> chunk_test_tokens(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 5 + salt * 11 + i * i) % vocab);
  return t;
}

// The suite's parameter: "attention" (attention alone) or "hybrid".
class AttentionModels : public ::testing::TestWithParam<std::string> {
 protected:
  const char* config() const {
    return GetParam() == "hybrid" ? kRetentionAttention : kAttentionLayers;
  }
};

}  // namespace

TEST_P(AttentionModels, ChunkwiseLogitsEqualTheParallelForm) {
  const Model m = perturbed_attention_model(config(), 3);
  ASSERT_TRUE(m.config().has_form(Form::Chunkwise));
  const int64_t B = 2, T = 24, V = m.config().vocab_size;
  const auto tok = chunk_test_tokens(B * T, V, 1);
  const auto parallel = test::model_logits(m, tok, B, Form::Parallel);
  for (int64_t chunk : {1, 6, 7, 24, 64})  // 6 divides T, 7 does not, 64 is longer
    EXPECT_TRUE(test::close(test::model_logits(m, tok, B, Form::Chunkwise, chunk), parallel, 1e-5))
        << "chunk " << chunk;
  const std::vector<int32_t> one{17};  // T = 1
  EXPECT_TRUE(test::close(test::model_logits(m, one, 1, Form::Chunkwise, 4),
                          test::model_logits(m, one, 1, Form::Parallel), 1e-5));
}

TEST_P(AttentionModels, PromptContinuedAfterAChunkwisePrefill) {
  // A chunkwise prefill of 13 tokens, 9 more in the chunkwise form, then recurrent steps: the
  // attention layers' caches and the retention layers' states carry across the calls.
  const Model m = perturbed_attention_model(config(), 4);
  const int64_t T = 26, V = m.config().vocab_size;
  const auto tok = chunk_test_tokens(T, V, 2);
  const auto parallel = test::model_logits(m, tok, 1, Form::Parallel);
  State state(m.config(), 1);
  Arena arena;
  std::vector<float> got(static_cast<size_t>(T * V), NAN);
  ForwardOptions chunkwise;
  chunkwise.form = Form::Chunkwise;
  chunkwise.chunk = 5;
  forward_logits(m, tok.data(), 1, 13, got.data(), chunkwise, arena, &state);
  chunkwise.chunk = 4;
  forward_logits(m, tok.data() + 13, 1, 9, got.data() + 13 * V, chunkwise, arena, &state);
  ForwardOptions rec;
  rec.form = Form::Recurrent;
  forward_logits(m, tok.data() + 22, 1, T - 22, got.data() + 22 * V, rec, arena, &state);
  EXPECT_EQ(state.positions[0], T);
  EXPECT_TRUE(test::close(got, parallel, 1e-5));
}

TEST_P(AttentionModels, ChunkwiseTrainingGivesTheParallelGradients) {
  const Model m = perturbed_attention_model(config(), 5);
  ASSERT_TRUE(m.config().trains_with(Form::Chunkwise));
  const int64_t B = 2, T = 19, V = m.config().vocab_size;
  ParamBuffer gp(m.params().layout());
  test::expect_chunkwise_gradients_match(m, chunk_test_tokens(B * T, V, 3),
                                         chunk_test_tokens(B * T, V, 4), B, T, 8, gp);
  double norm = 0;
  for (size_t i = 0; i < gp.size(); ++i) norm += double(gp.data()[i]) * gp.data()[i];
  EXPECT_GT(norm, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Models, AttentionModels, ::testing::Values("attention", "hybrid"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(HybridChunkwise, SequenceParallelTrainingIsRefusedNamingTheLayer) {
  // An attention layer's cache has no constant-size summary to pass between slices.
  EXPECT_TRUE(test::throws_error_naming(
      [] { check_slices_supported(Config::from_json(kRetentionAttention)); },
      {"layer 1", "attention", "keeps every earlier token"}));
}

TEST(HybridChunkwiseCli, EvalAndChunkwiseLogitsOnFlaAndInitModels) {
  const fs::path dir = test::fresh_temp_dir("hybrid_chunkwise_cli");
  const std::string data = test::write_file(
      dir / "text.txt", "a hybrid model reads this text in chunks and in one pass alike.\n");
  // An fla directory with an attention layer (byte vocabulary), and the same shape from init.
  const std::string fla = R"({"model_type": "retnet", "hidden_size": 32, "num_hidden_layers": 3,
    "num_heads": 4, "vocab_size": 256, "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2,
    "qkv_bias": true, "rope_theta": 10000, "window_size": null}})";
  save_hf_directory(Model::init(parse_hf_config(fla, "config.json").config, 5),
                    (dir / "fla").string(), HfFlavour::Fla, "f32", {});
  nlohmann::json cfg = nlohmann::json::parse(kRetentionAttention);
  cfg["vocab_size"] = 256;
  const std::string config = test::write_file(dir / "config.json", cfg.dump());
  const std::string init = (dir / "init.safetensors").string();
  ASSERT_EQ(test::run_retnet("init --config " + config + " --out " + init, 300).exit_code, 0);
  for (const std::string& model : {(dir / "fla").string(), init}) {
    SCOPED_TRACE(model);
    // eval: the default (chunkwise) form gives the parallel form's loss.
    const std::string eval =
        "eval -m " + model + " --data " + data + " --tokenizer bytes --seq 24 --batch 2 --json";
    auto ec = test::run_retnet(eval, 300), ep = test::run_retnet(eval + " --form parallel", 300);
    ASSERT_EQ(ec.exit_code, 0) << ec.err;
    ASSERT_EQ(ep.exit_code, 0) << ep.err;
    const double lc = nlohmann::json::parse(ec.out)["loss"].get<double>();
    const double lp = nlohmann::json::parse(ep.out)["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(lc)) << ec.out;
    EXPECT_NEAR(lc, lp, 1e-5 * std::abs(lp));
    // logits --mode chunkwise with a chunk that does not divide the tokens.
    const std::string tokens = "5,17,99,3,250,41,8,8,120,64,7";
    auto logits = [&](const std::string& mode, const std::string& out) {
      auto r = test::run_retnet(
          "logits -m " + model + " --tokens " + tokens + " --mode " + mode + " --chunk 4 -o " + out,
          300);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return read_npy(out).data;
    };
    EXPECT_TRUE(test::close(logits("chunkwise", (dir / "c.npy").string()),
                            logits("parallel", (dir / "p.npy").string()), 1e-5));
  }
  fs::remove_all(dir);
}

TEST(HybridChunkwiseCli, TrainsChunkwiseAndRefusesSequenceParallelNamingTheLayer) {
  const fs::path dir = test::fresh_temp_dir("hybrid_chunkwise_train");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "retention and attention layers take turns in this model.\n";
  const std::string data = test::write_file(dir / "text.txt", text);
  nlohmann::json cfg = nlohmann::json::parse(kRetentionAttention);
  cfg["vocab_size"] = 256;
  const std::string config = test::write_file(dir / "config.json", cfg.dump());
  const std::string train = "train --config " + config + " --data " + data +
                            " --steps 2 --seq 32 --batch 2 --threads 2 --out ";
  auto r = test::run_retnet(train + (dir / "chunkwise").string() + " --form chunkwise", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE((r.out + r.err).find("chunkwise form"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir / "chunkwise" / "model.safetensors"));
  EXPECT_TRUE(
      test::fails_cleanly(test::run_retnet(train + (dir / "sp").string() + " --seq-parallel", 300),
                          "layer 1 uses 'attention', which keeps every earlier token"));
  fs::remove_all(dir);
}
