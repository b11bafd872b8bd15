// The Hugging Face layouts ask the mixers' descriptions (MixerSpec::hf): every registered mixer
// exports and imports back or is refused by name, and a description decides what a layout holds.
#include <filesystem>

#include "retnet/model/hf_layout.h"
#include "retnet/retnet.h"
#include "test_helpers.h"

using namespace retnet;
using detail::HfRole;
namespace fs = std::filesystem;

namespace {

// A small model in each layout's conventions.
Config layout_config(HfFlavour flavour) {
  if (flavour == HfFlavour::Syncdoth) return test::tiny_config();
  return parse_hf_config(R"({"hidden_size": 16, "num_hidden_layers": 2, "num_heads": 2,
                             "vocab_size": 30, "intermediate_size": 20})",
                         "config.json")
      .config;
}

HfRole role_in(const MixerSpec& m, HfFlavour flavour) {
  return m.hf ? m.hf->in(flavour).role : HfRole::None;
}

// A model of `m`: every layer (the base role, or no role: the model is refused), or the second
// layer of a hybrid whose first is the layout's base mixer (the hybrid role).
Config config_of(const MixerSpec& m, HfFlavour flavour) {
  if (role_in(m, flavour) == HfRole::None)  // the mixer's own defaults
    return Config::from_json(fmt::format(R"({{"mixer": "{}", "decoder_layers": 2,
        "decoder_embed_dim": 16, "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20,
        "vocab_size": 30}})",
                                         m.name),
                             "config");
  Config c = layout_config(flavour);
  if (role_in(m, flavour) == HfRole::Base) {
    c.mixer = &m;
    return c;
  }
  Config layer = c;  // fla's hybrid layers are hidden_size wide
  layer.mixer = &m;
  test::set_mixer_options(layer,
                          fmt::format(R"({{"attention": {{"value_dim": {}}}}})", c.embed_dim));
  c.layer_specs = {{&detail::hf_base_mixer(flavour), c.mixer_options}, {&m, layer.mixer_options}};
  return c;
}

}  // namespace

TEST(HfLayout, EveryRegisteredMixerExportsAndImportsOrIsRefusedByName) {
  const fs::path dir = test::fresh_temp_dir("hf_layout");
  for (HfFlavour flavour : {HfFlavour::Fla, HfFlavour::Syncdoth})
    for (const MixerSpec* m : mixer_registry()) {
      const std::string where = std::string(hf_flavour_name(flavour)) + "_" + m->name;
      SCOPED_TRACE(where);
      const Config c = config_of(*m, flavour);
      const Model model = Model::init(c, 7);
      const std::string out = (dir / where).string();
      if (role_in(*m, flavour) == HfRole::None) {
        // Without a description the mixer names itself; with one, the layout's mixers.
        const std::string name = m->name;
        const std::string why =
            m->hf ? "layout holds retention models" : "has no Hugging Face layout";
        EXPECT_TRUE(
            test::throws_error_naming([&] { save_hf_directory(model, out, flavour, "f32", {}); },
                                      {m->hf ? "layer 0's mixer: " + name : "mixer '" + name + "'",
                                       why, hf_flavour_name(flavour)}));
        EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
        continue;
      }
      save_hf_directory(model, out, flavour, "f32", {});
      const Model back = load_hf_directory(out);
      for (int64_t l = 0; l < c.layers; ++l)
        EXPECT_EQ(&back.config().layer_mixer(l), &c.layer_mixer(l));
      ASSERT_EQ(back.params().size(), model.params().size());
      EXPECT_EQ(0, std::memcmp(back.params().data(), model.params().data(),
                               model.params().size() * sizeof(float)));
    }
  fs::remove_all(dir);
}

TEST(HfLayout, ATestOnlyMixersDescriptionDecidesWhatTheLayoutHolds) {
  // A copy of retention under another name, unknown to the registry: the layouts see it only
  // through its description.
  MixerSpec copy = find_mixer("retention");
  copy.name = "retention_copy";
  copy.hf = nullptr;
  Config fla = layout_config(HfFlavour::Fla);
  const std::string retention_json = hf_config_json(fla, HfFlavour::Fla);
  fla.mixer = &copy;
  EXPECT_TRUE(test::throws_error_naming(
      [&] { hf_config_json(fla, HfFlavour::Fla); },
      {"mixer 'retention_copy' has no Hugging Face layout", "fla layout holds retention models"}));

  detail::HfMixerLayout layout = *find_mixer("retention").hf;
  layout.syncdoth.role = HfRole::None;
  copy.hf = &layout;
  EXPECT_EQ(&detail::hf_layout_of(copy, HfFlavour::Fla), &layout.fla);
  EXPECT_EQ(hf_config_json(fla, HfFlavour::Fla), retention_json);  // the base mixer's keys
  Config syncdoth = layout_config(HfFlavour::Syncdoth);
  syncdoth.mixer = &copy;
  EXPECT_TRUE(
      test::throws_error_naming([&] { hf_config_json(syncdoth, HfFlavour::Syncdoth); },
                                {"syncdoth layout holds", "layer 0's mixer: retention_copy"}));

  // As a hybrid mixer it may hold some layers of a hybrid model, not all of a model's.
  layout.fla.role = HfRole::Hybrid;
  EXPECT_TRUE(test::throws_error_naming([&] { hf_config_json(fla, HfFlavour::Fla); },
                                        {"layer 0's mixer: retention_copy"}));
  fla.mixer = &find_mixer("retention");
  fla.layer_specs = {{&find_mixer("retention"), nullptr}, {&copy, nullptr}};
  EXPECT_NO_THROW(hf_config_json(fla, HfFlavour::Fla));
}

TEST(HfLayout, ImportRefusesAMixerTheLayoutDoesNotHoldByName) {
  // syncdoth's config.json is the engine's config JSON, which may name any mixer.
  for (const char* mixer : {"aft", "attention"})
    EXPECT_TRUE(test::throws_error_naming(
        [&] {
          parse_hf_config(fmt::format(R"({{"decoder_embed_dim": 16, "decoder_layers": 1,
              "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "vocab_size": 30,
              "mixer": "{}"}})",
                                      mixer),
                          "cfg.json");
        },
        {"cfg.json", mixer, "syncdoth layout"}));
}
