#pragma once
// The options struct of a mixer with one integer setting, a top-level config field checked
// against a range (the Performer's feature count, AFT's position-bias length).
#include <cstdint>
#include <memory>

#include "../../model/json_fields.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::detail {

// `Options` has one int64_t member `value`; `kKey` names its field, [kMin, kMax] its range.
template <class Options, const char* kKey, int64_t kMin, int64_t kMax>
struct IntOptionCodec {
  static void check(int64_t v) {
    RETNET_CHECK(v >= kMin && v <= kMax, "config: {} must be in [{}, {}], got {}", kKey, kMin, kMax,
                 v);
  }
  static MixerOptionsPtr read(const nlohmann::json& config, const std::string& origin) {
    if (!config.contains(kKey) || config[kKey].is_null()) return nullptr;
    auto o = std::make_shared<Options>();
    o->value = json_int(config, kKey, o->value, origin);
    check(o->value);
    return o;
  }
  static void write(const MixerOptions* options, nlohmann::ordered_json& config) {
    config[kKey] = options ? static_cast<const Options&>(*options).value : Options{}.value;
  }
  static void validate_layer(const Config& c) { check(mixer_options<Options>(c).value); }
  static const MixerOptionsCodec& codec() {
    static const MixerOptionsCodec codec{
        .keys = {kKey}, .read = read, .write = write, .validate_layer = validate_layer};
    return codec;
  }
};

}  // namespace retnet::detail
