// config.json of flash-linear-attention's and syncdoth's RetNets <-> the engine's Config.
#include <nlohmann/json.hpp>
#include <set>

#include "json_fields.h"
#include "retnet/core/error.h"
#include "retnet/core/json_parse.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/hf_layout.h"

namespace retnet {
namespace {

using nlohmann::json;

// Keys of transformers' PretrainedConfig and of training or other runtimes: no effect on the
// function a model computes here.
const std::set<std::string> kRuntimeKeys = {
    "_name_or_path", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version",
    "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "use_cache",
    "initializer_range", "tie_word_embeddings", "is_decoder", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "max_position_embeddings",
    // fla
    "attn_mode", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy",
    "use_l2warp", "conv_size", "conv_bias",
    // syncdoth
    "forward_impl", "output_retentions", "z_loss_coeff", "subln", "use_ffn_rms_norm"};

using detail::hf_expanded;
using detail::hf_is_neutral;
using detail::hf_positive_int;
using detail::hf_refuse_unless_neutral;
using detail::HfLayoutOfMixer;
using detail::HfRole;
using detail::json_bool;
using detail::json_number;

// A special token's id: absent or null is none (-1); an integer must index the vocabulary; a
// list (transformers allows several eos ids) must hold such integers and gives its first.
int64_t optional_id(const json& j, const char* key, int64_t vocab_size, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return -1;
  const json& v = j[key];
  auto check = [&](const json& id, const std::string& name) {
    RETNET_CHECK(id.is_number_integer(), "{}: '{}' must be a token id (an integer), got {}", origin,
                 name, id.dump());
    const int64_t i = id.get<int64_t>();
    RETNET_CHECK(i >= 0 && i < vocab_size, "{}: '{}' = {} is outside the vocabulary of {} tokens",
                 origin, name, i, vocab_size);
    return i;
  };
  if (!v.is_array()) return check(v, key);
  for (size_t i = 0; i < v.size(); ++i) check(v[i], fmt::format("{}[{}]", key, i));
  return v.empty() ? -1 : v[0].get<int64_t>();
}

// The descriptions of the registry's mixers that a layout holds, in the registry's order.
std::vector<const HfLayoutOfMixer*> layout_mixers(HfFlavour flavour) {
  std::vector<const HfLayoutOfMixer*> found;
  for (const MixerSpec* m : mixer_registry())
    if (m->hf && m->hf->in(flavour).role != HfRole::None) found.push_back(&m->hf->in(flavour));
  return found;
}

// "retention models and their hybrids with attention layers", from the registry.
std::string layout_holds(HfFlavour flavour) {
  std::string base, hybrid;
  for (const MixerSpec* m : mixer_registry()) {
    const HfRole role = m->hf ? m->hf->in(flavour).role : HfRole::None;
    std::string& names = role == HfRole::Base ? base : hybrid;
    if (role != HfRole::None) names += (names.empty() ? "" : " or ") + std::string(m->name);
  }
  return base + " models" + (hybrid.empty() ? "" : " and their hybrids with " + hybrid + " layers");
}

bool is_mixer_key(const std::string& key, HfFlavour flavour) {
  for (const HfLayoutOfMixer* m : layout_mixers(flavour))
    for (const char* k : m->keys)
      if (key == k) return true;
  return false;
}

// The model's keys here; the mixers' keys (heads, widths, gates, hybrid layers) are read by their
// descriptions.
HfModelConfig parse_fla(const json& j, const std::string& origin) {
  static const std::set<std::string> known = {
      "hidden_size", "num_hidden_layers", "hidden_ratio",   "intermediate_size", "vocab_size",
      "norm_eps",    "hidden_act",        "use_short_conv", "attnres_block_size"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()) && !kRuntimeKeys.count(it.key()) &&
        !is_mixer_key(it.key(), HfFlavour::Fla) && !hf_is_neutral(it.value()))
      throw Error(
          fmt::format("{}: unknown key '{}' = {} (this engine implements fla's RetNet "
                      "without it; remove it if it does not change the model)",
                      origin, it.key(), it.value().dump()));
  hf_refuse_unless_neutral(j, "use_short_conv", origin, "short convolutions are not implemented");
  hf_refuse_unless_neutral(j, "attnres_block_size", origin,
                           "attention residuals are not implemented");
  HfModelConfig h;
  h.flavour = HfFlavour::Fla;
  Config& c = h.config;
  c.mixer = &detail::hf_base_mixer(HfFlavour::Fla);
  c.embed_dim = hf_positive_int(j, "hidden_size", origin);
  c.layers = hf_positive_int(j, "num_hidden_layers", origin);
  c.vocab_size = hf_positive_int(j, "vocab_size", origin);
  if (j.contains("intermediate_size") && !j["intermediate_size"].is_null()) {
    c.ffn_dim = hf_positive_int(j, "intermediate_size", origin);
  } else {
    const double ratio = json_number(j, "hidden_ratio", 4.0, origin);  // GatedMLP's default
    const int64_t n = static_cast<int64_t>(static_cast<double>(c.embed_dim) * ratio * 2 / 3);
    c.ffn_dim = 256 * ((n + 255) / 256);
  }
  const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string()
                              ? j["hidden_act"].get<std::string>()
                              : "swish";
  RETNET_CHECK(act == "swish" || act == "silu",
               "{}: 'hidden_act' = \"{}\" is not supported (the engine implements swish)", origin,
               act);
  c.activation = Activation::Swish;
  c.layernorm_eps = json_number(j, "norm_eps", 1e-6, origin);
  c.rotary = RotaryStyle::HalfSplit;
  c.rope_theta = 10000.0;
  c.no_scale_embedding = true;
  for (const HfLayoutOfMixer* m : layout_mixers(HfFlavour::Fla))
    if (m->read) m->read(j, c, origin);
  h.tied_embeddings = json_bool(j, "tie_word_embeddings", false, origin);
  c.tie_embeddings = h.tied_embeddings;
  return h;
}

HfModelConfig parse_syncdoth(json j, const std::string& origin) {
  HfModelConfig h;
  h.flavour = HfFlavour::Syncdoth;
  RETNET_CHECK(json_bool(j, "use_glu", true, origin),
               "{}: 'use_glu' = false is not supported (the engine's FFN is the gated one)",
               origin);
  h.tied_embeddings = json_bool(j, "tie_word_embeddings", false, origin);
  // The rest is the engine's config JSON, but for the keys the mixers translate.
  json config = j;
  config.erase("use_glu");
  for (const std::string& key : kRuntimeKeys) config.erase(key);
  for (const HfLayoutOfMixer* m : layout_mixers(HfFlavour::Syncdoth))
    for (const char* key : m->keys) config.erase(key);
  h.config = Config::from_json(config.dump(), origin);
  for (const HfLayoutOfMixer* m : layout_mixers(HfFlavour::Syncdoth))
    if (m->read) m->read(j, h.config, origin);
  h.config.tie_embeddings = h.config.tie_embeddings || h.tied_embeddings;
  h.tied_embeddings = h.config.tie_embeddings;
  return h;
}

// The keys of fla's config.json in the order this engine writes them (so files stay identical
// from one version to the next); a key not listed follows them.
const char* const kFlaKeyOrder[] = {"model_type",
                                    "architectures",
                                    "hidden_size",
                                    "num_hidden_layers",
                                    "num_heads",
                                    "num_kv_heads",
                                    "expand_k",
                                    "expand_v",
                                    "intermediate_size",
                                    "hidden_act",
                                    "use_output_gate",
                                    "elementwise_affine",
                                    "norm_eps",
                                    "feature_map",
                                    "use_short_conv",
                                    "attn",
                                    "tie_word_embeddings",
                                    "vocab_size"};

nlohmann::ordered_json in_fla_order(const nlohmann::ordered_json& j) {
  nlohmann::ordered_json ordered;
  for (const char* key : kFlaKeyOrder)
    if (j.contains(key)) ordered[key] = j[key];
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!ordered.contains(it.key())) ordered[it.key()] = it.value();
  return ordered;
}

}  // namespace

namespace detail {

bool hf_is_neutral(const json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()); }

int64_t hf_positive_int(const json& j, const char* key, const std::string& origin) {
  RETNET_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0,
               "{}: '{}' must be a positive integer, got {}", origin, key,
               j.contains(key) ? j[key].dump() : "nothing");
  return j[key].get<int64_t>();
}

void hf_refuse_unless_neutral(const json& j, const char* key, const std::string& origin,
                              const char* why) {
  if (j.contains(key) && !hf_is_neutral(j[key]))
    throw Error(fmt::format("{}: '{}' = {} is not supported: {}", origin, key, j[key].dump(), why));
}

int64_t hf_expanded(int64_t hidden, double ratio, const char* key, const std::string& origin) {
  const double w = static_cast<double>(hidden) * ratio;
  RETNET_CHECK(ratio > 0 && w >= 1 && w < double(int64_t{1} << 40),
               "{}: '{}' = {} gives no usable width", origin, key, ratio);
  return static_cast<int64_t>(w);
}

void HfRefuse::operator()(bool cannot, const char* option) const {
  RETNET_CHECK(!cannot, "the {} layout cannot express this model's {}", hf_flavour_name(flavour),
               option);
}

const HfLayoutOfMixer& hf_layout_of(const MixerSpec& spec, HfFlavour flavour) {
  RETNET_CHECK(spec.hf != nullptr,
               "mixer '{}' has no Hugging Face layout (the {} layout holds {} "
               "only)",
               spec.name, hf_flavour_name(flavour), layout_holds(flavour));
  return spec.hf->in(flavour);
}

const MixerSpec& hf_base_mixer(HfFlavour flavour) {
  for (const MixerSpec* m : mixer_registry())
    if (m->hf && m->hf->in(flavour).role == HfRole::Base) return *m;
  throw Error(fmt::format("no mixer has the {} layout's base role", hf_flavour_name(flavour)));
}

void check_hf_mixers(const Config& c, HfFlavour flavour) {
  for (int64_t l = 0; l < c.layers; ++l) {
    const MixerSpec& m = c.layer_mixer(l);
    const HfRole role = hf_layout_of(m, flavour).role;
    RETNET_CHECK(role == HfRole::Base || (c.hybrid() && role == HfRole::Hybrid),
                 "the {} layout holds {} only (layer {}'s mixer: {})", hf_flavour_name(flavour),
                 layout_holds(flavour), l, m.name);
  }
}

}  // namespace detail

bool is_hf_config(const std::string& text) {
  if (!is_valid_json(text)) return false;
  const json j = parse_json(text, "config");
  return j.is_object() && (j.contains("hidden_size") || j.contains("model_type"));
}

const char* hf_flavour_name(HfFlavour f) { return f == HfFlavour::Fla ? "fla" : "syncdoth"; }

HfModelConfig parse_hf_config(const std::string& text, const std::string& origin) {
  const json j = parse_json(text, origin);
  RETNET_CHECK(j.is_object(), "{}: expected a JSON object", origin);
  if (j.contains("model_type") && j["model_type"].is_string())
    RETNET_CHECK(j["model_type"] == "retnet",
                 "{}: 'model_type' = {} is not a RetNet (expected \"retnet\")", origin,
                 j["model_type"].dump());
  HfModelConfig h;
  if (j.contains("hidden_size"))
    h = parse_fla(j, origin);
  else if (j.contains("decoder_embed_dim"))
    h = parse_syncdoth(j, origin);
  else
    throw Error(
        fmt::format("{}: neither 'hidden_size' (flash-linear-attention) nor "
                    "'decoder_embed_dim' (syncdoth, torchscale): not a RetNet config",
                    origin));
  try {
    h.config.validate();
    detail::check_hf_mixers(h.config, h.flavour);  // syncdoth's file may name any mixer
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  h.bos_id = optional_id(j, "bos_token_id", h.config.vocab_size, origin);
  h.eos_id = optional_id(j, "eos_token_id", h.config.vocab_size, origin);
  // Padding never reaches the model here, and old configs write -1 for none: read leniently.
  h.pad_id = j.contains("pad_token_id") && j["pad_token_id"].is_number_integer()
                 ? j["pad_token_id"].get<int64_t>()
                 : -1;
  return h;
}

std::string hf_config_json(const Config& c, HfFlavour flavour, int64_t bos, int64_t eos,
                           int64_t pad) {
  detail::check_hf_mixers(c, flavour);
  const detail::HfRefuse refuse{flavour};
  nlohmann::ordered_json j;
  if (flavour == HfFlavour::Fla) {
    refuse(c.rotary != RotaryStyle::HalfSplit || c.rope_theta != 10000.0,
           "rotation (fla rotates half-split pairs with base 10000: rotary \"half_split\")");
    refuse(c.activation != Activation::Swish, "activation (fla's FFN is SwiGLU)");
    refuse(!c.no_scale_embedding, "embedding scale");
    j["model_type"] = "retnet";
    j["architectures"] = {"RetNetForCausalLM"};
    j["hidden_size"] = c.embed_dim;
    j["num_hidden_layers"] = c.layers;
    j["intermediate_size"] = c.ffn_dim;
    j["hidden_act"] = "swish";
    j["norm_eps"] = c.layernorm_eps;
    j["use_short_conv"] = false;
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["vocab_size"] = c.vocab_size;
    for (const HfLayoutOfMixer* m : layout_mixers(flavour))
      if (m->write) m->write(c, j, refuse);
    j = in_fla_order(j);
  } else {
    refuse(c.rotary != RotaryStyle::Torchscale, "half-split rotation");
    j = nlohmann::ordered_json::parse(c.to_json());
    for (const HfLayoutOfMixer* m : layout_mixers(flavour))
      if (m->write) m->write(c, j, refuse);
    j["use_glu"] = true;
    j["model_type"] = "retnet";
    j["architectures"] = {"RetNetForCausalLM"};
    j["tie_word_embeddings"] = c.tie_embeddings;
  }
  if (bos >= 0) j["bos_token_id"] = bos;
  if (eos >= 0) j["eos_token_id"] = eos;
  if (pad >= 0) j["pad_token_id"] = pad;
  return j.dump(2);
}

}  // namespace retnet
