#pragma once
// The token mixers a model's blocks can use (the config's "mixer" field). A mixer is one spec,
// found through one registry (src/model/mixer_registry.cpp): its name, what it adds to a layer's
// parameters (projection widths, its own tensors with their init and weight decay), the state or
// cache it carries between calls, the forms it has, its FLOPs, and its block (the LayerMixer that
// runs it, internal: src/include/retnet/model/mixer_layer.h). Everything else in a block (norms,
// FFN, residuals) is the same for all, and nothing outside the registry and the mixer's own folder
// (src/mixers/<name>/) names a mixer.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "retnet/core/form.h"

namespace retnet {

struct Config;
namespace detail {
class LayerMixer;
struct HfMixerLayout;
struct MixerOptionsCodec;
}

// A tensor a mixer has besides its projections, per layer: "layers.N.<scope>.<name>".
struct MixerTensor {
  const char* name;
  std::vector<int64_t> (*shape)(const Config& c);
  // Fills the layer's tensor (n floats) at initialisation: a pure function of (seed, layer).
  void (*init)(const Config& c, int64_t layer, uint64_t seed, float* w, int64_t n);
  // Whether AdamW decays it (none do today: the Performer's matrix is drawn, never trained, and
  // decay alone would shrink it; the others are vectors).
  bool weight_decay = false;
  // Whether a config has it (nullptr: always); an absent tensor's index is kNoTensor.
  bool (*present)(const Config& c) = nullptr;
};

struct MixerSpec {
  const char* name;   // the config's "mixer" value
  const char* scope;  // the scope of its tensor names: "layers.N.<scope>.q_proj.weight"
  const char* summary;
  // Widths of the input projections q | k | v | g (rows of one matrix [P, d]): q and k are d wide
  // (per head) or value_dim wide (per channel); g is value_dim wide or absent.
  bool per_channel = false;
  bool gated = false;
  bool rotates = false;  // queries and keys rotated by position
  bool decays_by_head = false;  // uses the config's per-head decays gamma_h
  // Keeps every earlier token (a cache growing with the sequence) instead of a constant state;
  // its parallel form then continues a cache (prefill).
  bool keeps_tokens = false;
  bool forms[4] = {true, true, false, false};  // indexed by Form: parallel, recurrent, chunkwise, scan
  // The chunkwise form's fastest chunk size where it differs from the config's default (0).
  int64_t preferred_chunk = 0;
  std::vector<MixerTensor> tensors = {};  // its own tensors, in layout order
  // Its options struct's JSON fields and checks (src/mixers/<name>/<name>_options.cpp), or
  // nullptr: the mixer has no options of its own.
  const detail::MixerOptionsCodec* options = nullptr;
  // Floats of one sequence's constant-size state per layer (none: the mixers that keep tokens).
  int64_t (*state_floats_per_layer)(const Config& c) = nullptr;
  // Floats one sequence's cache grows by per token per layer (none: constant-state mixers).
  int64_t (*cache_floats_per_token_per_layer)(const Config& c) = nullptr;
  // Forward FLOPs per token per layer of the mixer's core (beyond its projections) over sequences
  // of T tokens in the given form (chunk: the chunkwise form's chunk size).
  double (*core_flops_per_token)(const Config& c, int64_t T, Form form, int64_t chunk) = nullptr;
  const detail::LayerMixer& (*block)() = nullptr;
  // Adapts a model's config to one of this mixer's layers (attention: its options' heads and
  // widths), or nullptr: the model's settings.
  void (*adapt_layer_config)(Config& c) = nullptr;
  // Its place in the Hugging Face layouts (src/mixers/<name>/<name>_hf.cpp), or nullptr: import
  // and export refuse it by name.
  const detail::HfMixerLayout* hf = nullptr;

  bool has_form(Form form) const { return forms[static_cast<int>(form)]; }
  // The forms training runs: parallel, and chunkwise where the mixer has it.
  bool trains_with(Form form) const {
    return form == Form::Parallel || (form == Form::Chunkwise && has_form(form));
  }
  // The form sessions prefill prompts with: chunkwise where the mixer has it and keeps no tokens
  // (a token cache prefills in one parallel pass), else parallel.
  Form prefill_form() const {
    return has_form(Form::Chunkwise) && !keeps_tokens ? Form::Chunkwise : Form::Parallel;
  }
};

// Every mixer, in the registry's order: the built-in ones, then the registered ones.
std::span<const MixerSpec* const> mixer_registry();
// Adds a mixer defined outside the library, from one line at namespace scope:
//   static const bool registered = retnet::register_mixer(toy_mixer_spec());
// `spec` must outlive every model (a function-local static); its block implements the internal
// LayerMixer interface (src/include/retnet/model/mixer_layer.h). Throws Error on a name taken.
// Returns true, for that line's variable.
bool register_mixer(const MixerSpec& spec);
// The spec named `name`; throws Error listing the valid names.
const MixerSpec& find_mixer(const std::string& name);
// "retention, attention, linear, ...", from the registry.
std::string mixer_names();
// The default mixer of a config: retention.
const MixerSpec& default_mixer();

}  // namespace retnet
