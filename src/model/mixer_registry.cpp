// The registry of token mixers: one line per mixer. Each mixer's spec and block live in its folder
// (src/mixers/<name>/, blocks shared by two mixers in src/mixers/shared/); nothing else names a
// mixer.
#include "retnet/core/error.h"
#include "retnet/model/mixer.h"
#include "retnet/model/mixer_layer.h"

namespace retnet {

namespace {

// The built-in mixers, then the ones register_mixer added, in the order they were added.
std::vector<const MixerSpec*>& registered_mixers() {
  static std::vector<const MixerSpec*> registry = {
      &detail::retention_mixer_spec(),   // retention/retention_block.cpp
      &detail::attention_mixer_spec(),   // attention/attention_block.cpp
      &detail::linear_mixer_spec(),      // linear/linear_spec.cpp
      &detail::performer_mixer_spec(),   // performer/performer_spec.cpp
      &detail::aft_mixer_spec(),         // aft/aft_block.cpp
      &detail::aft_simple_mixer_spec(),  // aft_simple/aft_simple_spec.cpp
      &detail::rwkv_mixer_spec(),        // rwkv/rwkv_spec.cpp
  };
  return registry;
}

}  // namespace

std::span<const MixerSpec* const> mixer_registry() { return registered_mixers(); }

bool register_mixer(const MixerSpec& spec) {
  RETNET_CHECK(spec.name && spec.scope && spec.block,
               "register_mixer: a mixer spec needs a name, a scope and a block");
  for (const MixerSpec* m : mixer_registry())
    RETNET_CHECK(std::string(spec.name) != m->name,
                 "register_mixer: a mixer named '{}' is already registered (mixers: {})", spec.name,
                 mixer_names());
  registered_mixers().push_back(&spec);
  return true;
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
