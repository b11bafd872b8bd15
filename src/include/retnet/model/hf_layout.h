#pragma once
// A mixer's place in the Hugging Face layouts (fla, syncdoth): whether it can appear in one (as
// the base mixer of every layer or as a hybrid model's layers), its tensor names there and the
// config.json keys it reads and writes. A MixerSpec points at its description (MixerSpec::hf);
// hf_config.cpp and hf_directory.cpp ask the registry's descriptions, never a mixer by name.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "retnet/model/config.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/mixer.h"

namespace retnet::detail {

enum class HfRole {
  None,    // the layout cannot hold it
  Base,    // every layer's mixer of a model the layout holds (no "mixer" key in fla's file)
  Hybrid,  // some layers of a hybrid model whose other layers are the base mixer
};

// One of the mixer's tensors: its name after "layers.N.<scope>.", the layout's name of it (nullptr:
// the same) after the layout's prefix for a layer's mixer (fla: "attn."), and another name a file
// may give it (nullptr: none).
struct HfTensorName {
  const char* engine;
  const char* layout = nullptr;
  const char* also = nullptr;
};

// Refuses what a layout cannot express: throws Error naming the option ("the fla layout cannot
// express this model's <option>").
struct HfRefuse {
  HfFlavour flavour;
  void operator()(bool cannot, const char* option) const;
};

struct HfLayoutOfMixer {
  HfRole role = HfRole::None;
  // The layout's names of its tensors (its norm is the layout's norm of a layer's mixer); empty
  // where the layout keeps the engine's names (syncdoth).
  std::vector<HfTensorName> names = {};
  // The config.json keys it reads (accepted beside the layout's own).
  std::vector<const char*> keys = {};
  // Reads its keys into a config whose model keys are read (fla: hidden_size, layers, vocab);
  // nullptr where the config's JSON holds them (syncdoth).
  void (*read)(const nlohmann::json& j, Config& c, const std::string& origin) = nullptr;
  // Writes its keys of a model's config.json (called for every model the layout holds, so a
  // hybrid mixer writes its "none" value where no layer uses it), refusing what it cannot express.
  void (*write)(const Config& c, nlohmann::ordered_json& j, const HfRefuse& refuse) = nullptr;
};

struct HfMixerLayout {
  HfLayoutOfMixer fla, syncdoth;
  const HfLayoutOfMixer& in(HfFlavour f) const { return f == HfFlavour::Fla ? fla : syncdoth; }
};

// The mixers' descriptions (src/mixers/<name>/<name>_hf.cpp).
const HfMixerLayout& retention_hf_layout();
const HfMixerLayout& attention_hf_layout();

// A spec's description in a layout; throws Error "mixer '<name>' has no Hugging Face layout" for
// a mixer that has none.
const HfLayoutOfMixer& hf_layout_of(const MixerSpec& spec, HfFlavour flavour);
// The registry's first mixer with the base role in a layout (what fla's layers are).
const MixerSpec& hf_base_mixer(HfFlavour flavour);
// Refuses a config the layout cannot hold: a mixer with no description or no role fitting its
// place (the base role for a single-mixer model; base or hybrid for a hybrid one's layers).
void check_hf_mixers(const Config& c, HfFlavour flavour);

// Readers shared by the layouts' keys.
bool hf_is_neutral(const nlohmann::json& v);  // null or false
// j[key] as a positive integer; Error naming the key otherwise.
int64_t hf_positive_int(const nlohmann::json& j, const char* key, const std::string& origin);
// An Error naming a key the engine does not implement, unless it has its neutral value.
void hf_refuse_unless_neutral(const nlohmann::json& j, const char* key, const std::string& origin,
                              const char* why);
// fla's width rule: int(hidden * ratio) (a float ratio in the file).
int64_t hf_expanded(int64_t hidden, double ratio, const char* key, const std::string& origin);

}  // namespace retnet::detail
