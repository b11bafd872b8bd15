// Hugging Face model directories: fla and syncdoth configs, export -> import is the identity,
// what a layout cannot express is refused, fine-tuning an imported model lowers its loss.
// (Logits against the independent PyTorch reference and the bad-input cases: check_fla.py.)
#include <filesystem>
#include <fstream>

#include "retnet/core/half.h"
#include "retnet/retnet.h"
#include "test_helpers.h"
#include "train_fixture.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

Config fla_style_config() {
  Config c = test::fla_conventions(test::model_config(32, 64, 4, 96, 2, 256));
  c.key_embed_dim = 64;
  return c;
}

// The 1.3B fla-hub checkpoint's config.json, as released.
const char* kFla13B = R"({
  "architectures": ["RetNetForCausalLM"], "attn_mode": "chunk", "bos_token_id": 1,
  "clamp_min": null, "conv_size": 4, "elementwise_affine": true, "eos_token_id": 2,
  "expand_k": 1, "expand_v": 2, "feature_map": null, "fuse_cross_entropy": true,
  "fuse_norm": true, "hidden_act": "swish", "hidden_ratio": 2, "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": null, "max_position_embeddings": 2048,
  "model_type": "retnet", "norm_eps": 1e-06, "num_heads": 8, "num_hidden_layers": 24,
  "num_kv_heads": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0", "use_cache": true, "use_output_gate": true,
  "use_short_conv": false, "vocab_size": 32000})";

void expect_same_params(const Model& a, const Model& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  EXPECT_EQ(0, std::memcmp(a.params().data(), b.params().data(), a.params().size() * 4));
}

}  // namespace

TEST(HfDirectory, ReadsFlaHubRetnet13BConfig) {
  const HfModelConfig h = parse_hf_config(kFla13B, "config.json");
  EXPECT_EQ(h.flavour, HfFlavour::Fla);
  const Config& c = h.config;
  EXPECT_EQ(c.embed_dim, 2048);
  EXPECT_EQ(c.value_embed_dim, 4096);
  EXPECT_EQ(c.qk_width(), 2048);
  EXPECT_EQ(c.ffn_dim, 2816);  // int(2048 * 2 * 2/3) rounded up to a multiple of 256
  EXPECT_EQ(c.parameter_count(), 1351727104);
  EXPECT_EQ(c.rotary, RotaryStyle::HalfSplit);
  EXPECT_FALSE(c.normalize_scores);
  EXPECT_TRUE(c.head_norm_weight);
  EXPECT_EQ(h.bos_id, 1);
  EXPECT_EQ(h.eos_id, 2);
}

TEST(HfDirectory, RefusesSettingsItDoesNotImplementByKey) {
  auto fails_naming = [](const std::string& json, const std::string& key) {
    EXPECT_TRUE(test::throws_error_naming([&] { parse_hf_config(json, "cfg.json"); }, {key, "cfg.json"}))
        << json;
  };
  const std::string base = R"({"hidden_size": 32, "num_hidden_layers": 1, "num_heads": 2,
                               "vocab_size": 64)";
  fails_naming(base + R"(, "use_short_conv": true})", "use_short_conv");
  fails_naming(base + R"(, "hidden_act": "gelu"})", "hidden_act");
  fails_naming(base + R"(, "some_new_option": 3})", "some_new_option");
  fails_naming(base + R"(, "model_type": "llama"})", "model_type");
  fails_naming(R"({"decoder_embed_dim": 32, "use_glu": false})", "use_glu");
  fails_naming("{not json", "cfg.json");
  fails_naming(R"({"vocab_size": 10})", "hidden_size");
  // Neutral values of unknown keys and runtime-only keys are accepted.
  EXPECT_NO_THROW(parse_hf_config(base + R"(, "future_flag": false, "fuse_swiglu": true,
                                            "use_l2warp": false, "attn": null})",
                                  "cfg.json"));
}

TEST(HfDirectory, ExportThenImportIsTheIdentity) {
  const fs::path dir = test::fresh_temp_dir("hf_export");
  const Model fla = Model::init(fla_style_config(), 3);
  const Model sync = Model::init(test::model_config(32, 64, 4, 96, 2, 256), 4);
  for (const auto& [model, flavour] :
       {std::pair{&fla, HfFlavour::Fla}, std::pair{&sync, HfFlavour::Syncdoth}}) {
    const std::string out = (dir / hf_flavour_name(flavour)).string();
    save_hf_directory(*model, out, flavour, "f32", {}, 1, 2);
    EXPECT_TRUE(is_hf_directory(out));
    HfLoadInfo info;
    const Model back = load_hf_directory(out, &info);
    EXPECT_EQ(info.hf.flavour, flavour);
    EXPECT_EQ(back.config().to_json(), model->config().to_json());
    EXPECT_EQ(info.hf.eos_id, 2);
    expect_same_params(*model, back);
    // Once more through the generic loader and out again: the same directory contents.
    LoadInfo li;
    const Model again = load_model(out, std::nullopt, &li);
    EXPECT_EQ(li.flavour, hf_flavour_name(flavour));
    expect_same_params(*model, again);
  }
  // BF16: every weight comes back as its bf16 rounding.
  const std::string out = (dir / "bf16").string();
  save_hf_directory(fla, out, HfFlavour::Fla, "bf16", {}, -1, -1);
  HfLoadInfo info;
  const Model back = load_hf_directory(out, &info);
  EXPECT_EQ(info.stored_dtypes.at("BF16"), static_cast<int64_t>(fla.params().layout().size()));
  for (size_t i = 0; i < fla.params().size(); ++i)
    ASSERT_EQ(back.params().data()[i], bf16_to_float(float_to_bf16(fla.params().data()[i])));
  fs::remove_all(dir);
}

TEST(HfDirectory, ExportRefusesWhatTheLayoutCannotExpress) {
  const fs::path dir = test::fresh_temp_dir("hf_refuse");
  const Model torchscale = Model::init(test::tiny_config(), 1);
  EXPECT_THROW(save_hf_directory(torchscale, (dir / "a").string(), HfFlavour::Fla, "f32", {}),
               Error);
  const Model fla = Model::init(fla_style_config(), 1);
  EXPECT_THROW(save_hf_directory(fla, (dir / "b").string(), HfFlavour::Syncdoth, "f32", {}),
               Error);
  Config aft = test::tiny_config();
  aft.mixer = &find_mixer("aft");
  EXPECT_THROW(save_hf_directory(Model::init(aft, 1), (dir / "c").string(), HfFlavour::Syncdoth,
                                 "f32", {}),
               Error);
  EXPECT_FALSE(fs::exists(dir / "a" / "config.json"));
  fs::remove_all(dir);
}

TEST(HfDirectory, FineTuningAnImportedModelLowersTheLoss) {
  const test::TrainFixture fx("hf_finetune");
  const Model start = Model::init(fla_style_config(), 5);
  save_hf_directory(start, (fx.dir / "fla").string(), HfFlavour::Fla, "f32", {});
  TrainOptions o = fx.options("run");
  o.config_path.clear();
  o.init_from = (fx.dir / "fla").string();
  o.steps = 15;
  o.optimizer.warmup_steps = 3;
  const TrainResult r = train(o);
  // Held-out text under the starting weights and the fine-tuned ones.
  const Model tuned = load_model((fx.dir / "run" / "model.safetensors").string());
  EXPECT_EQ(tuned.config().to_json(), start.config().to_json());
  std::ifstream in(std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt",
                   std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = make_byte_tokenizer()->encode(text.substr(60000, 4000));
  const std::span<const int32_t> inputs(ids.data(), ids.size() - 1),
      targets(ids.data() + 1, ids.size() - 1);
  const double before = ModelRunner(start).loss(inputs, targets, 1);
  const double after = ModelRunner(tuned).loss(inputs, targets, 1);
  EXPECT_LT(after, before - 0.2) << "train loss " << r.final_train_loss;
}
