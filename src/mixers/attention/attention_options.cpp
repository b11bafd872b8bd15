// The attention options in a config's JSON, and their checks against a layer's widths.
#include "attention_options.h"

#include <cmath>
#include <memory>
#include <utility>

#include "../../model/json_fields.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::detail {
namespace {

using nlohmann::json;

const char* const kFields[] = {"heads",      "kv_heads", "value_dim",
                               "rope_theta", "qkv_bias", "window_size"};

bool is_field(const std::string& key) {
  for (const char* k : kFields)
    if (key == k) return true;
  return false;
}

// The fields present in `v` over `a` (the others are left as they are).
void read_fields(const json& v, AttentionOptions& a, const std::string& where) {
  constexpr std::pair<const char*, int64_t AttentionOptions::*> kIntegers[] = {
      {"heads", &AttentionOptions::heads},
      {"kv_heads", &AttentionOptions::kv_heads},
      {"value_dim", &AttentionOptions::value_dim},
      {"window_size", &AttentionOptions::window_size}};
  for (const auto& [key, field] : kIntegers) a.*field = json_int(v, key, a.*field, where);
  a.rope_theta = json_number(v, "rope_theta", a.rope_theta, where);
  a.qkv_bias = json_bool(v, "qkv_bias", a.qkv_bias, where);
}

// Only the fields that differ from the model's (0, false).
void write_fields(const MixerOptions* options, nlohmann::ordered_json& j) {
  if (options == nullptr) return;
  const auto& a = static_cast<const AttentionOptions&>(*options);
  if (a.heads) j["heads"] = a.heads;
  if (a.kv_heads) j["kv_heads"] = a.kv_heads;
  if (a.value_dim) j["value_dim"] = a.value_dim;
  if (a.rope_theta) j["rope_theta"] = a.rope_theta;
  if (a.qkv_bias) j["qkv_bias"] = true;
  if (a.window_size) j["window_size"] = a.window_size;
}

MixerOptionsPtr read(const json& config, const std::string& origin) {
  if (!config.contains("attention") || config["attention"].is_null()) return nullptr;
  const json& v = config["attention"];
  RETNET_CHECK(v.is_object(), "{}: 'attention' must be an object, got {}", origin, v.dump());
  for (auto it = v.begin(); it != v.end(); ++it)
    RETNET_CHECK(is_field(it.key()), "{}: unknown field 'attention.{}'", origin, it.key());
  auto a = std::make_shared<AttentionOptions>();
  read_fields(v, *a, origin + ": attention");
  return a;
}

void write(const MixerOptions* options, nlohmann::ordered_json& config) {
  nlohmann::ordered_json a = nlohmann::ordered_json::object();
  write_fields(options, a);
  if (!a.empty()) config["attention"] = a;
}

MixerOptionsPtr read_layer(const json& entry, const MixerOptionsPtr& model,
                           const std::string& where) {
  auto a = std::make_shared<AttentionOptions>();
  if (model) *a = static_cast<const AttentionOptions&>(*model);
  read_fields(entry, *a, where);
  return a;
}

// An attention layer's config, its options applied (Config::layer).
void validate_layer(const Config& c) {
  const AttentionOptions& a = mixer_options<AttentionOptions>(c);
  RETNET_CHECK(a.heads >= 0 && a.kv_heads >= 0 && a.value_dim >= 0 && a.window_size >= 0 &&
                   a.value_dim <= (1 << 20) && a.heads <= 4096,
               "config: attention.heads ({}), attention.kv_heads ({}), attention.value_dim ({}) "
               "and attention.window_size ({}) must be >= 0 (0: the model's)",
               a.heads, a.kv_heads, a.value_dim, a.window_size);
  RETNET_CHECK(
      a.rope_theta == 0 || (std::isfinite(a.rope_theta) && a.rope_theta > 1),
      "config: attention.rope_theta must be 0 (the model's) or a finite number > 1, got {}",
      a.rope_theta);
  RETNET_CHECK(a.rope_theta == 0 || c.rotary == RotaryStyle::HalfSplit,
               "config: attention.rope_theta = {} applies to the half-split rotation only "
               "(rotary: \"half_split\")",
               a.rope_theta);
  RETNET_CHECK(c.embed_dim % c.heads == 0,
               "config: attention.heads {} (0: decoder_retention_heads) does not divide "
               "decoder_embed_dim {}",
               c.heads, c.embed_dim);
  RETNET_CHECK(c.heads % c.kv_head_count() == 0,
               "config: attention.kv_heads {} does not divide the attention heads {}", c.kv_heads,
               c.heads);
  RETNET_CHECK(c.value_embed_dim % c.heads == 0,
               "config: attention.value_dim {} is not divisible by the attention heads {}",
               c.value_embed_dim, c.heads);
}

}  // namespace

const MixerOptionsCodec& attention_options_codec() {
  static const MixerOptionsCodec codec{.keys = {"attention"},
                                       .read = read,
                                       .write = write,
                                       .refused_unused = true,
                                       .is_layer_field = is_field,
                                       .read_layer = read_layer,
                                       .write_layer = write_fields,
                                       .validate_layer = validate_layer};
  return codec;
}

}  // namespace retnet::detail
