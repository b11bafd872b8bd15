#pragma once
// How a mixer's options struct meets a config's JSON (see retnet/model/mixer_options.h): which
// fields it reads, how it reads and writes them, what it checks. A mixer with options points its
// spec's `options` here; the config code asks the registry and names no mixer.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/model/config.h"
#include "retnet/model/mixer_options.h"

namespace retnet::detail {

struct MixerOptionsCodec {
  // The config's top-level fields the options are read from (the known-field list).
  std::vector<const char*> keys;
  // The options in a config's top-level fields (a null pointer where none is given); checks each
  // field's type and range, naming it after `origin`.
  MixerOptionsPtr (*read)(const nlohmann::json& config, const std::string& origin);
  // Writes the options' fields into a config's top level (all of them: written only for a
  // config that has the mixer).
  void (*write)(const MixerOptions* options, nlohmann::ordered_json& config);
  // Whether the options set in a config whose layers lack this mixer are refused (else ignored).
  bool refused_unused = false;
  // A per-layer entry of a hybrid "mixer" list may carry these fields, read over the model's
  // options (the others keep the model's); null: entries carry no options.
  bool (*is_layer_field)(const std::string& key) = nullptr;
  MixerOptionsPtr (*read_layer)(const nlohmann::json& entry, const MixerOptionsPtr& model,
                                const std::string& where) = nullptr;
  void (*write_layer)(const MixerOptions* options, nlohmann::ordered_json& entry) = nullptr;
  // Checks one of the mixer's layers as a whole (its options against the model's widths).
  void (*validate_layer)(const Config& layer) = nullptr;
};

// The options of a single-mixer config's mixer, of type T (its defaults where the config has
// none); an internal error when the config's options are another mixer's.
template <class T>
const T& mixer_options(const ModelSettings& c) {
  static const T defaults;
  if (!c.mixer_options) return defaults;
  const auto* options = dynamic_cast<const T*>(c.mixer_options.get());
  RETNET_CHECK(options != nullptr, "internal: the {} mixer's config holds another mixer's options",
               c.mixer->name);
  return *options;
}

}  // namespace retnet::detail
