// config.json of flash-linear-attention's and syncdoth's RetNets <-> the engine's Config.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "retnet/core/error.h"
#include "retnet/core/json_parse.h"
#include "retnet/model/hf_directory.h"
#include "json_fields.h"

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

bool is_neutral(const json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()); }

int64_t int_key(const json& j, const char* key, const std::string& origin) {
  RETNET_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0,
               "{}: '{}' must be a positive integer, got {}", origin, key,
               j.contains(key) ? j[key].dump() : "nothing");
  return j[key].get<int64_t>();
}

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

// A setting the engine does not implement: an Error naming it, unless it has its neutral value.
void refuse_unless_neutral(const json& j, const char* key, const std::string& origin,
                           const char* why) {
  if (j.contains(key) && !is_neutral(j[key]))
    throw Error(fmt::format("{}: '{}' = {} is not supported: {}", origin, key, j[key].dump(), why));
}

// fla's width rule: int(hidden * ratio) (a float ratio in the file).
int64_t expanded(int64_t hidden, double ratio, const char* key, const std::string& origin) {
  const double w = static_cast<double>(hidden) * ratio;
  RETNET_CHECK(ratio > 0 && w >= 1 && w < double(int64_t{1} << 40),
               "{}: '{}' = {} gives no usable width", origin, key, ratio);
  return static_cast<int64_t>(w);
}

// fla's "attn": {"layers": [...], "num_heads", "num_kv_heads", "qkv_bias", "rope_theta",
// "window_size"} (or a list of such objects) makes those layers softmax attention over head dim
// hidden / num_heads, with q, o: hidden x hidden and k, v: num_kv_heads * head dim x hidden.
void read_fla_attention_layers(const json& attn, Config& c, const std::string& origin) {
  RETNET_CHECK(attn.is_object() || attn.is_array(),
               "{}: 'attn' = {} must be null, an object or a list of objects", origin, attn.dump());
  const json specs = attn.is_array() ? attn : json::array({attn});
  c.layer_specs.assign(static_cast<size_t>(c.layers), {&default_mixer(), c.attention});
  std::vector<bool> taken(static_cast<size_t>(c.layers), false);
  static const std::set<std::string> known = {"layers",   "num_heads",  "num_kv_heads", "qkv_bias",
                                              "qk_norm",  "rope_theta", "window_size"};
  for (const json& s : specs) {
    RETNET_CHECK(s.is_object() && s.contains("layers") && s["layers"].is_array() &&
                     s.contains("num_heads"),
                 "{}: 'attn' entry {} needs 'layers' (a list) and 'num_heads'", origin, s.dump());
    for (auto it = s.begin(); it != s.end(); ++it)
      RETNET_CHECK(known.count(it.key()) || is_neutral(it.value()),
                   "{}: 'attn.{}' = {} is not supported", origin, it.key(), it.value().dump());
    refuse_unless_neutral(s, "qk_norm", origin + ": attn", "q/k norms are not implemented");
    AttentionOptions a;
    a.heads = int_key(s, "num_heads", origin + ": attn");
    if (s.contains("num_kv_heads") && !s["num_kv_heads"].is_null()) {
      const int64_t kv = int_key(s, "num_kv_heads", origin + ": attn");
      a.kv_heads = kv == a.heads ? 0 : kv;
    }
    a.value_dim = c.embed_dim;
    a.qkv_bias = json_bool(s, "qkv_bias", false, origin + ": attn");
    const double theta = json_number(s, "rope_theta", 10000.0, origin + ": attn");
    a.rope_theta = theta == c.rope_theta ? 0 : theta;
    a.window_size = detail::json_int(s, "window_size", 0, origin + ": attn");
    RETNET_CHECK(!s.contains("window_size") || s["window_size"].is_null() || a.window_size > 0,
                 "{}: 'attn.window_size' = {} must be null or positive", origin,
                 s["window_size"].dump());
    for (const json& l : s["layers"]) {
      RETNET_CHECK(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < c.layers &&
                       !taken[l.get<size_t>()],
                   "{}: 'attn.layers' entry {} is not a layer in [0, {}) or is repeated", origin,
                   l.dump(), c.layers);
      taken[l.get<size_t>()] = true;
      c.layer_specs[l.get<size_t>()] = {&find_mixer("attention"), a};
    }
  }
}

HfModelConfig parse_fla(const json& j, const std::string& origin) {
  static const std::set<std::string> known = {
      "hidden_size", "num_hidden_layers", "num_heads", "num_kv_heads", "expand_k", "expand_v",
      "hidden_ratio", "intermediate_size", "vocab_size", "norm_eps", "hidden_act",
      "elementwise_affine", "use_output_gate", "feature_map", "use_short_conv", "attn",
      "attnres_block_size"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()) && !kRuntimeKeys.count(it.key()) && !is_neutral(it.value()))
      throw Error(fmt::format("{}: unknown key '{}' = {} (this engine implements fla's RetNet "
                              "without it; remove it if it does not change the model)",
                              origin, it.key(), it.value().dump()));
  refuse_unless_neutral(j, "use_short_conv", origin, "short convolutions are not implemented");
  refuse_unless_neutral(j, "attnres_block_size", origin, "attention residuals are not implemented");
  HfModelConfig h;
  h.flavour = HfFlavour::Fla;
  Config& c = h.config;
  c.embed_dim = int_key(j, "hidden_size", origin);
  c.layers = int_key(j, "num_hidden_layers", origin);
  c.heads = int_key(j, "num_heads", origin);
  c.vocab_size = int_key(j, "vocab_size", origin);
  if (j.contains("num_kv_heads") && !j["num_kv_heads"].is_null()) {
    const int64_t kv = int_key(j, "num_kv_heads", origin);
    RETNET_CHECK(kv <= c.heads && c.heads % kv == 0,
                 "{}: 'num_kv_heads' = {} does not divide 'num_heads' = {}", origin, kv, c.heads);
    c.kv_heads = kv == c.heads ? 0 : kv;
  }
  c.feature_map = detail::json_feature_map(j, "feature_map", c.feature_map, origin);
  c.key_embed_dim = expanded(c.embed_dim, json_number(j, "expand_k", 1.0, origin), "expand_k", origin);
  c.value_embed_dim = expanded(c.embed_dim, json_number(j, "expand_v", 2.0, origin), "expand_v", origin);
  if (j.contains("intermediate_size") && !j["intermediate_size"].is_null()) {
    c.ffn_dim = int_key(j, "intermediate_size", origin);
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
  c.head_norm_weight = json_bool(j, "elementwise_affine", true, origin);
  c.output_gate = json_bool(j, "use_output_gate", true, origin);
  c.rotary = RotaryStyle::HalfSplit;
  c.rope_theta = 10000.0;
  c.normalize_scores = false;
  c.decay = DecaySchedule::Torchscale;
  c.no_scale_embedding = true;
  if (c.key_embed_dim == c.embed_dim) c.key_embed_dim = 0;
  if (j.contains("attn") && !is_neutral(j["attn"])) read_fla_attention_layers(j["attn"], c, origin);
  h.tied_embeddings = json_bool(j, "tie_word_embeddings", false, origin);
  c.tie_embeddings = h.tied_embeddings;
  return h;
}

HfModelConfig parse_syncdoth(json j, const std::string& origin) {
  HfModelConfig h;
  h.flavour = HfFlavour::Syncdoth;
  RETNET_CHECK(json_bool(j, "use_glu", true, origin),
               "{}: 'use_glu' = false is not supported (the engine's FFN is the gated one)", origin);
  const bool lm_decay = json_bool(j, "use_lm_decay", false, origin);
  h.tied_embeddings = json_bool(j, "tie_word_embeddings", false, origin);
  for (const char* key : {"use_glu", "use_lm_decay"}) j.erase(key);
  for (const std::string& key : kRuntimeKeys) j.erase(key);
  if (lm_decay) j["decay"] = "paper";
  h.config = Config::from_json(j.dump(), origin);
  h.config.tie_embeddings = h.config.tie_embeddings || h.tied_embeddings;
  h.tied_embeddings = h.config.tie_embeddings;
  return h;
}

// The "attn" of a hybrid model (null without attention layers): one object per distinct set of
// attention options, a list where there are several.
template <class Refuse>
nlohmann::ordered_json fla_attention_json(const Config& c, Refuse refuse) {
  std::vector<std::pair<AttentionOptions, std::vector<int64_t>>> groups;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (&c.layer_mixer(l) == &default_mixer()) continue;
    const Config lc = c.layer(l);
    refuse(lc.value_embed_dim != c.embed_dim,
           "attention value width apart from hidden_size (attention.value_dim)");
    const AttentionOptions& a = lc.attention;
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == a; });
    if (it == groups.end()) groups.push_back({a, {l}});
    else it->second.push_back(l);
  }
  if (groups.empty()) return nullptr;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& [a, layers] : groups) {
    const Config lc = c.layer(layers[0]);
    nlohmann::ordered_json s;
    s["layers"] = layers;
    s["num_heads"] = lc.heads;
    s["num_kv_heads"] = lc.kv_head_count();
    s["qkv_bias"] = a.qkv_bias;
    s["rope_theta"] = lc.rope_theta;
    if (a.window_size > 0)
      s["window_size"] = a.window_size;
    else
      s["window_size"] = nullptr;
    list.push_back(s);
  }
  return list.size() == 1 ? list[0] : list;
}

}  // namespace

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
  // fla's hybrid models add attention layers; nothing else mixes tokens in either layout.
  const MixerSpec& attention = find_mixer("attention");
  for (int64_t l = 0; l < c.layers; ++l) {
    const MixerSpec& m = c.layer_mixer(l);
    RETNET_CHECK(&m == &default_mixer() || (flavour == HfFlavour::Fla && c.hybrid() && &m == &attention),
                 "the {} layout holds retention models{} only (layer {}'s mixer: {})",
                 hf_flavour_name(flavour),
                 flavour == HfFlavour::Fla ? " and their hybrids with attention layers" : "", l,
                 m.name);
  }
  auto refuse = [&](bool cannot, const char* option) {
    RETNET_CHECK(!cannot, "the {} layout cannot express this model's {}",
                 hf_flavour_name(flavour), option);
  };
  nlohmann::ordered_json j;
  if (flavour == HfFlavour::Fla) {
    refuse(c.rotary != RotaryStyle::HalfSplit || c.rope_theta != 10000.0,
           "rotation (fla rotates half-split pairs with base 10000: rotary \"half_split\")");
    refuse(c.normalize_scores, "score normalisation (fla's retention has none)");
    refuse(c.decay != DecaySchedule::Torchscale, "decay schedule (fla uses 1 - 2^(-5-h))");
    refuse(c.activation != Activation::Swish, "activation (fla's FFN is SwiGLU)");
    refuse(!c.no_scale_embedding, "embedding scale");
    refuse(c.key_dim() > 256, "key dim per head above 256");
    const double d = static_cast<double>(c.embed_dim);
    j["model_type"] = "retnet";
    j["architectures"] = {"RetNetForCausalLM"};
    j["hidden_size"] = c.embed_dim;
    j["num_hidden_layers"] = c.layers;
    j["num_heads"] = c.heads;
    if (c.kv_heads != 0 && c.kv_heads != c.heads)
      j["num_kv_heads"] = c.kv_heads;
    else
      j["num_kv_heads"] = nullptr;
    j["expand_k"] = static_cast<double>(c.qk_width()) / d;
    j["expand_v"] = static_cast<double>(c.value_embed_dim) / d;
    j["intermediate_size"] = c.ffn_dim;
    j["hidden_act"] = "swish";
    j["use_output_gate"] = c.output_gate;
    j["elementwise_affine"] = c.head_norm_weight;
    j["norm_eps"] = c.layernorm_eps;
    if (c.feature_map != QkFeatureMap::None)
      j["feature_map"] = qk_feature_map_name(c.feature_map);
    else
      j["feature_map"] = nullptr;
    j["use_short_conv"] = false;
    j["attn"] = fla_attention_json(c, refuse);
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["vocab_size"] = c.vocab_size;
    // expand_k and expand_v must give the widths back through int(hidden * ratio).
    refuse(static_cast<int64_t>(d * (static_cast<double>(c.qk_width()) / d)) != c.qk_width() ||
               static_cast<int64_t>(d * (static_cast<double>(c.value_embed_dim) / d)) !=
                   c.value_embed_dim,
           "q/k or value width (not an exact multiple of hidden_size)");
  } else {
    refuse(c.rotary != RotaryStyle::Torchscale, "half-split rotation");
    refuse(!c.normalize_scores, "retention without score normalisation");
    refuse(c.head_norm_weight, "head norm weight");
    refuse(!c.output_gate, "retention without output gate");
    refuse(c.qk_width() != c.embed_dim, "q/k width apart from decoder_embed_dim");
    refuse(c.kv_heads != 0 && c.kv_heads != c.heads, "kv_heads (keys and values shared by groups "
           "of heads)");
    refuse(c.feature_map != QkFeatureMap::None, "feature_map (a feature map of q and k)");
    j = nlohmann::ordered_json::parse(c.to_json());
    j.erase("decay");
    j["use_lm_decay"] = c.decay == DecaySchedule::Paper;
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
