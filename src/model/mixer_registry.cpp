// The registry of token mixers: one line per mixer. Each mixer's spec and block live in its block
// file (blocks/<name>_block.cpp) beside the layer code that runs it; nothing else names a mixer.
#include "mixer_layer.h"
#include "retnet/core/error.h"
#include "retnet/model/mixer.h"

namespace retnet {

std::span<const MixerSpec* const> mixer_registry() {
  static const MixerSpec* const registry[] = {
      &detail::retention_mixer_spec(),   // blocks/retention_block.cpp
      &detail::attention_mixer_spec(),   // blocks/attention_block.cpp
      &detail::linear_mixer_spec(),      // blocks/linear_block.cpp
      &detail::performer_mixer_spec(),   // blocks/linear_block.cpp
      &detail::aft_mixer_spec(),         // blocks/aft_block.cpp
      &detail::aft_simple_mixer_spec(),  // blocks/decay_block.cpp
      &detail::rwkv_mixer_spec(),        // blocks/decay_block.cpp
  };
  return registry;
}

const MixerSpec& default_mixer() { return *mixer_registry().front(); }

std::string mixer_names() {
  std::string names;
  for (const MixerSpec* m : mixer_registry())
    names += (names.empty() ? "" : ", ") + std::string(m->name);
  return names;
}

const MixerSpec& find_mixer(const std::string& name) {
  for (const MixerSpec* m : mixer_registry())
    if (name == m->name) return *m;
  throw Error(fmt::format("unknown mixer '{}' (expected one of: {})", name, mixer_names()));
}

}  // namespace retnet
