// Hybrid models (a "mixer" list: one mixer per layer): the config's list and per-layer attention
// options round-trip through JSON and are checked naming the layer and key; fla directories with
// attention layers ("attn") load and export back; `retnet info --length` counts the constant
// state and the attention layers' caches. Forms, training, sessions and state files of hybrid
// models: the hybrid cases of test_mixers.cpp.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/safetensors.h"
#include "retnet/retnet.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

const char* kHybrid = R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
  "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 48, "decoder_layers": 4,
  "vocab_size": 64, "rotary": "half_split", "attention": {"heads": 2, "value_dim": 32},
  "mixer": ["retention", "retention", "retention",
            {"mixer": "attention", "heads": 8, "kv_heads": 2, "qkv_bias": true,
             "rope_theta": 500, "value_dim": 32}]})";

void expect_error_naming(const std::string& json, std::initializer_list<const char*> words) {
  try {
    Config::from_json(json, "cfg.json");
    ADD_FAILURE() << "accepted " << json;
  } catch (const Error& e) {
    for (const char* w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << ": " << e.what();
  }
}

}  // namespace

TEST(HybridConfig, ListRoundTripsAndGivesEachLayerItsWidths) {
  const Config c = Config::from_json(kHybrid);
  ASSERT_TRUE(c.hybrid());
  EXPECT_EQ(c.mixer_description(), "hybrid (retention x3, attention x1)");
  EXPECT_EQ(Config::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(Config::from_json(c.to_json()).layer_specs, c.layer_specs);
  const Config a = c.layer(3);
  EXPECT_FALSE(a.hybrid());
  EXPECT_EQ(a.mixer, &find_mixer("attention"));
  EXPECT_EQ(a.heads, 8);
  EXPECT_EQ(a.key_dim(), 4);
  EXPECT_EQ(a.k_width(), 8);  // 2 kv heads of 4
  EXPECT_EQ(a.v_width(), 8);
  EXPECT_EQ(a.projection_width(), 32 + 8 + 8);
  EXPECT_EQ(a.rope_theta, 500);
  EXPECT_EQ(c.layer(0).projection_width(), 32 + 32 + 64 + 64);  // retention: q, k, v, g
  // The layout: fla's attention shapes, q/k/v biases, retention's layers untouched.
  const ParamLayout layout = make_param_layout(c);
  EXPECT_EQ(c.parameter_count(), static_cast<int64_t>(layout.total_floats()));
  auto shape_of = [&](const std::string& name) {
    for (const ParamEntry& e : layout.entries())
      if (e.name == name) return e.shape;
    ADD_FAILURE() << "no tensor " << name;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("layers.3.attention.q_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shape_of("layers.3.attention.k_proj.weight"), (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(shape_of("layers.3.attention.out_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shape_of("layers.3.attention.v_proj.bias"), (std::vector<int64_t>{8}));
  EXPECT_EQ(shape_of("layers.0.retention.g_proj.weight"), (std::vector<int64_t>{64, 32}));
  // State: retention's constant state in three layers; a cache in one (each kv head once).
  const Config r = c.layer(0);
  EXPECT_EQ(c.state_floats_per_sequence(), 3 * r.state_floats_per_sequence() / r.layers);
  EXPECT_EQ(c.cache_floats_per_token(), 8 + 8);
  // A list of one mixer repeated is that mixer; so is a plain name.
  const Config same = Config::from_json(R"({"decoder_layers": 2, "mixer": ["rwkv", "rwkv"]})");
  EXPECT_FALSE(same.hybrid());
  EXPECT_EQ(same.mixer, &find_mixer("rwkv"));
}

TEST(HybridConfig, ErrorsNameTheLayerAndKey) {
  expect_error_naming(R"({"decoder_layers": 3, "mixer": ["retention", "attention"]})",
                      {"mixer", "decoder_layers"});
  expect_error_naming(R"({"decoder_layers": 2, "mixer": ["retention", "mamba"]})",
                      {"mixer[1]", "aft-simple"});
  expect_error_naming(R"({"decoder_layers": 2, "mixer": ["retention", {"heads": 2}]})",
                      {"mixer[1]", "\"mixer\""});
  expect_error_naming(
      R"({"decoder_layers": 2, "mixer": ["attention", {"mixer": "retention", "heads": 2}]})",
      {"mixer[1].heads", "retention"});
  expect_error_naming(
      R"({"decoder_layers": 2, "mixer": ["retention", {"mixer": "attention", "kv_heads": 3}]})",
      {"layer 1", "attention.kv_heads"});
  expect_error_naming(
      R"({"decoder_layers": 2, "mixer": ["retention", {"mixer": "attention", "heads": 3}]})",
      {"layer 1", "attention.heads"});
  expect_error_naming(R"({"decoder_layers": 2,
      "mixer": ["retention", {"mixer": "attention", "rope_theta": 500}]})",
                      {"layer 1", "attention.rope_theta", "half_split"});
  expect_error_naming(R"({"decoder_layers": 2,
      "mixer": ["retention", {"mixer": "attention", "window_size": -4}]})",
                      {"layer 1", "attention.window_size"});
  expect_error_naming(R"({"attention": {"heads": 2}})", {"'attention'", "attention layers"});
  expect_error_naming(R"({"mixer": "attention", "attention": {"head": 2}})",
                      {"attention.head"});
  expect_error_naming(R"({"decoder_layers": 2, "mixer": []})", {"empty"});
  // Attention layers of different cache widths are fine: the token cache has a width per layer.
  EXPECT_NO_THROW(Config::from_json(R"({"decoder_layers": 2,
      "mixer": ["attention", {"mixer": "attention", "value_dim": 64}]})"));
}

TEST(HybridModel, RunsOnlyFormsEveryLayerHas) {
  // Attention has a chunkwise form (test_hybrid_chunkwise.cpp) but no scan form; a token cache
  // prefills in one parallel pass.
  const Model m = Model::init(Config::from_json(kHybrid), 2);
  EXPECT_TRUE(m.config().has_form(Form::Recurrent));
  EXPECT_TRUE(m.config().has_form(Form::Chunkwise));
  EXPECT_FALSE(m.config().has_form(Form::Scan));
  EXPECT_EQ(m.config().prefill_form(), Form::Parallel);
  std::vector<int32_t> tok(8, 3);
  Arena arena;
  std::vector<float> out(8 * 64);
  ForwardOptions o;
  o.form = Form::Scan;
  try {
    forward_logits(m, tok.data(), 1, 8, out.data(), o, arena);
    ADD_FAILURE() << "scan ran with an attention layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no scan form"), std::string::npos) << e.what();
  }
}

TEST(HybridFla, AttnLayersLoadAndExportBack) {
  const std::string fla = R"({"model_type": "retnet", "hidden_size": 32, "num_hidden_layers": 3,
    "num_heads": 4, "vocab_size": 64, "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2,
    "qkv_bias": true, "rope_theta": 10000, "window_size": null}})";
  const HfModelConfig h = parse_hf_config(fla, "config.json");
  const Config& c = h.config;
  ASSERT_TRUE(c.hybrid());
  EXPECT_EQ(&c.layer_mixer(1), &find_mixer("attention"));
  EXPECT_EQ(c.layer(1).kv_head_count(), 2);
  EXPECT_EQ(c.layer(1).value_embed_dim, 32);
  const fs::path dir = test::fresh_temp_dir("hybrid_fla");
  const Model m = Model::init(c, 5);
  save_hf_directory(m, (dir / "out").string(), HfFlavour::Fla, "f32", {});
  std::ifstream in(dir / "out" / "config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["attn"]["layers"], nlohmann::json::array({1}));
  EXPECT_EQ(j["attn"]["num_kv_heads"], 2);
  EXPECT_EQ(j["attn"]["qkv_bias"], true);
  HfLoadInfo info;  // loading with its info (which takes the parsed config) keeps the layers
  const Model back = load_hf_directory((dir / "out").string(), &info);
  EXPECT_TRUE(info.hf.config.hybrid());
  EXPECT_EQ(back.config().to_json(), m.config().to_json());
  ASSERT_EQ(back.params().size(), m.params().size());
  EXPECT_EQ(0, std::memcmp(back.params().data(), m.params().data(), m.params().size() * 4));
  // fla's names for the attention layer.
  const SafetensorsFile f = SafetensorsFile::open((dir / "out" / "model.safetensors").string());
  for (const char* name : {"model.layers.1.attn.q_proj.weight", "model.layers.1.attn.k_proj.bias",
                           "model.layers.1.attn.o_proj.weight", "model.layers.1.attn_norm.weight"})
    EXPECT_NE(f.find(name), nullptr) << name;
  // The syncdoth layout has no attention layers; bad attn entries name their key.
  EXPECT_THROW(save_hf_directory(m, (dir / "s").string(), HfFlavour::Syncdoth, "f32", {}), Error);
  auto fails_naming = [](const std::string& json, const std::string& key) {
    EXPECT_TRUE(test::throws_error_naming([&] { parse_hf_config(json, "cfg.json"); }, {key})) << json;
  };
  const std::string base = R"({"hidden_size": 32, "num_hidden_layers": 2, "num_heads": 2,
                               "vocab_size": 64, "attn": )";
  fails_naming(base + R"({"layers": [5], "num_heads": 2}})", "attn.layers");
  fails_naming(base + R"({"layers": [1], "num_heads": 2, "window_size": 0}})", "window_size");
  fails_naming(base + R"({"layers": [1], "num_heads": 2, "qk_norm": true}})", "qk_norm");
  fails_naming(base + R"({"layers": [1]}})", "num_heads");
  fs::remove_all(dir);
}

TEST(HybridCli, InfoCountsStateAndCacheAtALength) {
  const fs::path dir = test::fresh_temp_dir("hybrid_info");
  const std::string cfg = test::write_file(dir / "config.json", kHybrid);
  const std::string model = (dir / "m.safetensors").string();
  ASSERT_EQ(test::run_retnet("init --config " + cfg + " --out " + model).exit_code, 0);
  auto r = test::run_retnet("info " + model + " --json --length 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const Config c = Config::from_json(kHybrid);
  EXPECT_EQ(j["mixer"], "hybrid (retention x3, attention x1)");
  EXPECT_EQ(j["layer_mixers"][3], "attention");
  EXPECT_EQ(j["state_bytes_at_length"].get<int64_t>(),
            4 * (c.state_floats_per_sequence() + 100 * c.cache_floats_per_token()));
  auto text = test::run_retnet("info " + model + " --length 100");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("at 100 tokens"), std::string::npos) << text.out;
  // bench decode runs the mix, and its chunkwise prefill too.
  const std::string out = (dir / "bench.json").string();
  auto b = test::run_retnet("bench decode --quick --reps 1 --threads 2 -m " + model + " --json " +
                            out, 120);
  ASSERT_EQ(b.exit_code, 0) << b.err << b.out;
  std::ifstream in(out);
  const nlohmann::json res = nlohmann::json::parse(in);
  EXPECT_GT(res["decode_tokens_per_s_by_batch"]["1"]["median"].get<double>(), 0);
  EXPECT_EQ(res["cache_bytes_per_token"].get<int64_t>(), 4 * c.cache_floats_per_token());
  EXPECT_TRUE(res["prefill_tokens_per_s"]["512"].contains("chunkwise"));
  fs::remove_all(dir);
}
