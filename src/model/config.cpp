#include "retnet/model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "json_fields.h"
#include "retnet/core/error.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet {
namespace {

using nlohmann::json;

// torchscale fields that describe PyTorch training only; accepted and ignored.
const std::set<std::string> kIgnoredTorchscaleFields = {"dropout",
                                                        "activation_dropout",
                                                        "attention_dropout",
                                                        "drop_path_rate",
                                                        "checkpoint_activations",
                                                        "fsdp",
                                                        "ddp_rank",
                                                        "max_target_positions",
                                                        "moe_freq",
                                                        "moe_top1_expert",
                                                        "moe_expert_count",
                                                        "moe_gating_use_fp32",
                                                        "moe_eval_capacity_token_fraction",
                                                        "moe_second_expert_policy",
                                                        "moe_normalize_gate_prob_before_dropping",
                                                        "use_xmoe",
                                                        "rel_pos_buckets",
                                                        "max_rel_pos",
                                                        "subln",
                                                        "bert_init",
                                                        "xpos_rel_pos",
                                                        "xpos_scale_base",
                                                        "chunkwise_recurrent",
                                                        "decoder_attention_heads",
                                                        "no_output_layer",
                                                        "_comment",
                                                        "model_type",
                                                        "architectures",
                                                        "torch_dtype",
                                                        "transformers_version"};

using detail::json_bool;
using detail::json_choice;
using detail::json_int;
using detail::json_number;

constexpr std::pair<const char*, DecaySchedule> kDecays[] = {
    {"torchscale", DecaySchedule::Torchscale}, {"paper", DecaySchedule::Paper}};
constexpr std::pair<const char*, RotaryStyle> kRotaries[] = {
    {"torchscale", RotaryStyle::Torchscale}, {"half_split", RotaryStyle::HalfSplit}};

// The names of transformers' ACT2FN implemented as retention's feature map (the first of a
// value's names is the one written).
const std::pair<const char*, QkFeatureMap> kFeatureMaps[] = {
    {"none", QkFeatureMap::None},       {"relu", QkFeatureMap::Relu},
    {"relu2", QkFeatureMap::Relu2},     {"sigmoid", QkFeatureMap::Sigmoid},
    {"tanh", QkFeatureMap::Tanh},       {"gelu", QkFeatureMap::Gelu},
    {"gelu_python", QkFeatureMap::Gelu}, {"swish", QkFeatureMap::Swish},
    {"silu", QkFeatureMap::Swish}};
// The options of every registered mixer that has options, from a config's top-level fields (a
// null pointer where none are given).
using ModelOptions = std::vector<std::pair<const MixerSpec*, MixerOptionsPtr>>;
ModelOptions read_model_options(const json& j, const std::string& origin) {
  ModelOptions all;
  for (const MixerSpec* m : mixer_registry())
    if (m->options) all.emplace_back(m, m->options->read(j, origin));
  return all;
}
MixerOptionsPtr options_of(const ModelOptions& all, const MixerSpec* m) {
  for (const auto& [spec, options] : all)
    if (spec == m) return options;
  return nullptr;
}

// "mixer": one name, or a list of one entry per layer: a name, or an object {"mixer": name, ...}
// with the layer's own options where its mixer allows (attention's; read over the top-level ones).
// A list whose entries are all alike is that one mixer.
void read_mixers(const json& v, Config& c, const ModelOptions& model, const std::string& origin) {
  auto find = [&](const json& name, const std::string& where) -> const MixerSpec* {
    RETNET_CHECK(name.is_string(), "{}: '{}' must be one of {}, got {}", origin, where,
                 mixer_names(), name.dump());
    try {
      return &find_mixer(name.get<std::string>());
    } catch (const Error& e) {
      throw Error(fmt::format("{}: '{}': {}", origin, where, e.what()));
    }
  };
  if (!v.is_array()) {
    c.mixer = find(v, "mixer");
    c.mixer_options = options_of(model, c.mixer);
    return;
  }
  RETNET_CHECK(!v.empty(), "{}: 'mixer' is an empty list (one mixer per layer)", origin);
  std::vector<Config::LayerSpec> list;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = fmt::format("mixer[{}]", i);
    Config::LayerSpec spec;
    if (v[i].is_object()) {
      RETNET_CHECK(v[i].contains("mixer"), "{}: '{}' needs a \"mixer\" name", origin, where);
      spec.mixer = find(v[i]["mixer"], where + ".mixer");
      const detail::MixerOptionsCodec* codec = spec.mixer->options;
      const bool has_layer_fields = codec != nullptr && codec->read_layer != nullptr;
      for (auto it = v[i].begin(); it != v[i].end(); ++it)
        RETNET_CHECK(it.key() == "mixer" || (has_layer_fields && codec->is_layer_field(it.key())),
                     "{}: '{}.{}' is not a setting of a {} layer", origin, where, it.key(),
                     spec.mixer->name);
      spec.options = options_of(model, spec.mixer);
      if (has_layer_fields)
        spec.options = codec->read_layer(v[i], spec.options, origin + ": " + where);
    } else {
      spec.mixer = find(v[i], where);
      spec.options = options_of(model, spec.mixer);
    }
    list.push_back(spec);
  }
  c.mixer = list[0].mixer;
  c.mixer_options = list[0].options;
  const bool alike =
      std::all_of(list.begin(), list.end(), [&](const auto& e) { return e == list[0]; });
  if (alike) {
    c.layer_specs.clear();
    // decoder_layers must then agree with the list (validate names both for a hybrid list).
    RETNET_CHECK(static_cast<int64_t>(v.size()) == c.layers,
                 "{}: 'mixer' lists {} mixers for decoder_layers = {} (one per layer)", origin,
                 v.size(), c.layers);
  } else {
    c.layer_specs = std::move(list);
  }
}

// Options given for a mixer no layer has: refused where the mixer says so (else ignored).
void refuse_unused_options(const Config& c, const ModelOptions& model, const std::string& origin) {
  for (const auto& [spec, options] : model) {
    if (!spec->options->refused_unused || !options || options->is_default()) continue;
    bool used = false;
    for (int64_t l = 0; l < c.layers; ++l) used |= &c.layer_mixer(l) == spec;
    RETNET_CHECK(used, "{}: '{}' applies to {} layers only (mixer: {})", origin,
                 spec->options->keys[0], spec->name, c.mixer_description());
  }
}

}  // namespace

QkFeatureMap parse_qk_feature_map(const std::string& name) {
  for (const auto& [key, value] : kFeatureMaps)
    if (name == key) return value;
  throw Error(fmt::format("feature map \"{}\" is not implemented (one of none, relu, relu2, "
                          "sigmoid, tanh, gelu, gelu_python, swish, silu)",
                          name));
}

const char* qk_feature_map_name(QkFeatureMap f) {
  for (const auto& [key, value] : kFeatureMaps)
    if (value == f) return key;
  return "none";
}

double Config::embed_scale() const {
  return no_scale_embedding ? 1.0 : std::sqrt(static_cast<double>(embed_dim));
}

double Config::gamma(int64_t h) const {
  if (decay == DecaySchedule::Torchscale) return 1.0 - std::exp2(-5.0 - static_cast<double>(h));
  double lo = std::log(1.0 / 32), hi = std::log(1.0 / 512);
  double x = heads == 1 ? lo : lo + (hi - lo) * static_cast<double>(h) / (heads - 1);
  return 1.0 - std::exp(x);
}

namespace {

// The widths one layer's block needs consistent (heads divide them, an even key dim).
void check_layer_widths(const Config& c) {
  RETNET_CHECK(c.heads > 0 && c.value_embed_dim > 0, "config: heads ({}) and value width ({}) "
               "must be positive", c.heads, c.value_embed_dim);
  RETNET_CHECK(c.qk_width() % c.heads == 0,
               "config: the query/key width {} (key_embed_dim, else decoder_embed_dim) is not "
               "divisible by decoder_retention_heads {}",
               c.qk_width(), c.heads);
  RETNET_CHECK(c.value_embed_dim % c.heads == 0,
               "config: decoder_value_embed_dim {} is not divisible by decoder_retention_heads {}",
               c.value_embed_dim, c.heads);
  RETNET_CHECK(c.kv_heads >= 0 && c.kv_heads <= c.heads && c.heads % c.kv_head_count() == 0,
               "config: kv_heads {} must be 0 (= decoder_retention_heads) or divide "
               "decoder_retention_heads {}",
               c.kv_heads, c.heads);
  RETNET_CHECK(c.key_dim() % 2 == 0,
               "config: the key dim per head (decoder_embed_dim / heads = {}) must be even for the "
               "rotation",
               c.key_dim());
  RETNET_CHECK(c.key_dim() <= 1024, "config: key dim per head {} exceeds the supported 1024",
               c.key_dim());
}

}  // namespace

Config Config::layer(int64_t l) const {
  Config c;  // without the layer list
  static_cast<ModelSettings&>(c) = *this;
  if (hybrid()) {
    c.mixer = layer_specs[static_cast<size_t>(l)].mixer;
    c.mixer_options = layer_specs[static_cast<size_t>(l)].options;
  }
  if (hybrid() && c.mixer != &default_mixer()) {
    // Retention's options belong to the retention layers of a hybrid model.
    const Config neutral;
    c.key_embed_dim = 0;
    c.normalize_scores = neutral.normalize_scores;
    c.head_norm_weight = neutral.head_norm_weight;
    c.output_gate = neutral.output_gate;
    c.kv_heads = 0;
    c.feature_map = QkFeatureMap::None;
    if (!c.mixer->rotates) c.rotary = RotaryStyle::Torchscale;
  }
  if (c.mixer->adapt_layer_config) c.mixer->adapt_layer_config(c);
  return c;
}

bool Config::has_form(Form form) const {
  for (int64_t l = 0; l < layers; ++l)
    if (!layer_mixer(l).has_form(form)) return false;
  return true;
}

bool Config::keeps_tokens() const {
  for (int64_t l = 0; l < layers; ++l)
    if (layer_mixer(l).keeps_tokens) return true;
  return false;
}

std::string Config::mixer_description() const {
  if (!hybrid()) return mixer->name;
  std::vector<std::pair<const MixerSpec*, int64_t>> counts;
  for (const LayerSpec& spec : layer_specs) {
    const MixerSpec* m = spec.mixer;
    auto it = std::find_if(counts.begin(), counts.end(), [&](auto& e) { return e.first == m; });
    if (it == counts.end())
      counts.emplace_back(m, 1);
    else
      ++it->second;
  }
  std::string s = "hybrid (";
  for (size_t i = 0; i < counts.size(); ++i)
    s += fmt::format("{}{} x{}", i ? ", " : "", counts[i].first->name, counts[i].second);
  return s + ")";
}

namespace {
template <class F>
int64_t max_over_layers(const Config& c, F f) {
  if (!c.hybrid()) return f(c);
  int64_t m = 0;
  for (int64_t l = 0; l < c.layers; ++l) m = std::max(m, f(c.layer(l)));
  return m;
}
}  // namespace

int64_t Config::max_projection_width() const {
  return max_over_layers(*this, [](const Config& c) { return c.projection_width(); });
}
int64_t Config::max_value_dim() const {
  return max_over_layers(*this, [](const Config& c) { return c.value_embed_dim; });
}
int64_t Config::max_key_dim() const {
  return max_over_layers(*this, [](const Config& c) { return c.key_dim(); });
}

void Config::validate() const {
  RETNET_CHECK(embed_dim > 0 && value_embed_dim > 0 && heads > 0 && ffn_dim > 0 && layers > 0 &&
                   vocab_size > 0,
               "config: decoder_embed_dim ({}), decoder_value_embed_dim ({}), "
               "decoder_retention_heads ({}), decoder_ffn_embed_dim ({}), decoder_layers ({}) and "
               "vocab_size ({}) must all be positive",
               embed_dim, value_embed_dim, heads, ffn_dim, layers, vocab_size);
  RETNET_CHECK(embed_dim <= (1 << 20) && value_embed_dim <= (1 << 20) && ffn_dim <= (1 << 22) &&
                   layers <= 4096 && vocab_size <= (1 << 24),
               "config: dimensions are implausibly large");
  RETNET_CHECK(!hybrid() || static_cast<int64_t>(layer_specs.size()) == layers,
               "config: 'mixer' lists {} mixers for decoder_layers = {} (one per layer)",
               layer_specs.size(), layers);
  // The norms compute in float32: an eps that is inf there (1e300) zeroes every feature, and one
  // of 1 or more swamps mean(x^2) of any sane residual.
  RETNET_CHECK(layernorm_eps >= 0 && layernorm_eps < 1,
               "config: layernorm_eps must be a number in [0, 1) (it is used as float32), got {}",
               layernorm_eps);
  RETNET_CHECK(recurrent_chunk_size >= 1, "config: recurrent_chunk_size must be >= 1, got {}",
               recurrent_chunk_size);
  RETNET_CHECK(key_embed_dim >= 0 && key_embed_dim <= (1 << 20),
               "config: key_embed_dim must be in [0, 1048576], got {}", key_embed_dim);
  RETNET_CHECK(std::isfinite(rope_theta) && rope_theta > 1,
               "config: rope_theta must be a finite number > 1, got {}", rope_theta);
  bool any_retention = false;
  for (int64_t l = 0; l < layers; ++l) any_retention |= &layer_mixer(l) == &default_mixer();
  // The retention options below change only retention's block; a model without retention layers
  // refuses them rather than silently ignoring them.
  if (!any_retention) {
    auto refuse = [&](bool set, const char* key) {
      RETNET_CHECK(!set, "config: '{}' applies to the retention mixer only (mixer: {})", key,
                   mixer_description());
    };
    refuse(key_embed_dim != 0 && key_embed_dim != embed_dim, "key_embed_dim");
    refuse(!normalize_scores, "normalize_scores");
    refuse(head_norm_weight, "head_norm_weight");
    refuse(!output_gate, "output_gate");
    bool any_rotates = false;
    for (int64_t l = 0; l < layers; ++l) any_rotates |= layer_mixer(l).rotates;
    refuse(rotary != RotaryStyle::Torchscale && !any_rotates, "rotary");
    refuse(kv_heads != 0 && kv_heads != heads, "kv_heads");
    refuse(feature_map != QkFeatureMap::None, "feature_map");
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (l > 0 && !hybrid()) break;  // the layers of a single-mixer model are alike
    const Config c = layer(l);
    try {
      if (c.mixer->options && c.mixer->options->validate_layer) c.mixer->options->validate_layer(c);
      check_layer_widths(c);
    } catch (const Error& e) {
      if (!hybrid()) throw;
      throw Error(fmt::format("config: layer {} ({}): {}", l, c.mixer->name,
                              std::string(e.what()).substr(std::string("config: ").size())));
    }
    if (!hybrid()) continue;
    RETNET_CHECK(!keeps_tokens() || c.mixer->keeps_tokens || c.mixer->has_form(Form::Chunkwise),
                 "config: layer {} ({}) has no chunkwise form, which a hybrid model with a token "
                 "cache needs to continue its state in a prefill",
                 l, c.mixer->name);
  }
  RETNET_CHECK(parameter_count() < (int64_t{1} << 36), "config: {} parameters is too many",
               parameter_count());
}

int64_t Config::projection_width() const {
  const int64_t gate = gated() ? value_embed_dim : 0;
  if (mixer->per_channel) return 3 * value_embed_dim + gate;
  return qk_width() + k_width() + v_width() + gate;
}

int64_t Config::parameter_count() const {
  if (hybrid()) {
    int64_t total = 0;
    for (int64_t l = 0; l < layers; ++l) {
      Config c = layer(l);
      c.layers = 1;
      total += c.parameter_count() - c.vocabulary_parameters() - embed_dim;
    }
    return vocabulary_parameters() + total + embed_dim;
  }
  const int64_t d = embed_dim, vd = value_embed_dim;
  int64_t own = 0;  // the mixer's own tensors besides its projections
  for (const MixerTensor& t : mixer->tensors) {
    if (t.present && !t.present(*this)) continue;
    int64_t n = 1;
    for (int64_t extent : t.shape(*this)) n *= extent;
    own += n;
  }
  const int64_t per_layer = projection_width() * d + d * vd + d + own + 3 * ffn_dim * d + d;
  return vocabulary_parameters() + layers * per_layer + d;
}

int64_t Config::state_floats_per_sequence() const {
  if (hybrid()) {
    int64_t total = 0;
    for (int64_t l = 0; l < layers; ++l) {
      const Config c = layer(l);
      if (c.mixer->state_floats_per_layer) total += c.mixer->state_floats_per_layer(c);
    }
    return total;
  }
  return mixer->state_floats_per_layer ? layers * mixer->state_floats_per_layer(*this) : 0;
}

int64_t Config::cache_floats_per_token() const {
  if (hybrid()) {
    int64_t total = 0;
    for (int64_t l = 0; l < layers; ++l) {
      const Config c = layer(l);
      if (c.mixer->cache_floats_per_token_per_layer)
        total += c.mixer->cache_floats_per_token_per_layer(c);
    }
    return total;
  }
  // Through layer(0): an attention model's own options (kv heads) set its cache width.
  const Config c = layer(0);
  return c.mixer->cache_floats_per_token_per_layer
             ? layers * c.mixer->cache_floats_per_token_per_layer(c)
             : 0;
}

Config Config::from_json(const std::string& text, const std::string& origin) {
  const json j = parse_json(text, origin);
  RETNET_CHECK(j.is_object(), "{}: expected a JSON object, got {}", origin, j.type_name());
  Config c;
  c.embed_dim = json_int(j, "decoder_embed_dim", c.embed_dim, origin);
  c.value_embed_dim = json_int(j, "decoder_value_embed_dim", c.value_embed_dim, origin);
  c.heads = json_int(j, "decoder_retention_heads", c.heads, origin);
  c.ffn_dim = json_int(j, "decoder_ffn_embed_dim", c.ffn_dim, origin);
  c.layers = json_int(j, "decoder_layers", c.layers, origin);
  c.vocab_size = json_int(j, "vocab_size", c.vocab_size, origin);
  c.recurrent_chunk_size = json_int(j, "recurrent_chunk_size", c.recurrent_chunk_size, origin);
  c.no_scale_embedding = json_bool(j, "no_scale_embedding", c.no_scale_embedding, origin);
  c.layernorm_eps = json_number(j, "layernorm_eps", c.layernorm_eps, origin);
  if (j.contains("activation_fn")) {
    RETNET_CHECK(j["activation_fn"].is_string(), "{}: 'activation_fn' must be a string", origin);
    c.activation = parse_activation(j["activation_fn"].get<std::string>());
  }
  c.decay = json_choice(j, "decay", c.decay, kDecays, origin);
  const ModelOptions model_options = read_model_options(j, origin);
  if (j.contains("mixer"))
    read_mixers(j["mixer"], c, model_options, origin);
  else
    c.mixer_options = options_of(model_options, c.mixer);
  c.key_embed_dim = json_int(j, "key_embed_dim", c.key_embed_dim, origin);
  c.normalize_scores = json_bool(j, "normalize_scores", c.normalize_scores, origin);
  c.head_norm_weight = json_bool(j, "head_norm_weight", c.head_norm_weight, origin);
  c.output_gate = json_bool(j, "output_gate", c.output_gate, origin);
  c.rotary = json_choice(j, "rotary", c.rotary, kRotaries, origin);
  c.rope_theta = json_number(j, "rope_theta", c.rope_theta, origin);
  c.kv_heads = json_int(j, "kv_heads", c.kv_heads, origin);
  c.feature_map = detail::json_feature_map(j, "feature_map", c.feature_map, origin);
  // torchscale features that change the model and that this engine does not implement.
  auto reject_if = [&](const char* key, bool unsupported_value) {
    if (j.contains(key) && !j[key].is_null())
      RETNET_CHECK(json_bool(j, key, !unsupported_value, origin) != unsupported_value,
                   "{}: '{}' = {} is not supported by this engine", origin, key, j[key].dump());
  };
  reject_if("deepnorm", true);
  reject_if("multiway", true);
  reject_if("layernorm_embedding", true);
  c.tie_embeddings = json_bool(j, "share_decoder_input_output_embed", c.tie_embeddings, origin);
  reject_if("decoder_normalize_before", false);
  std::set<std::string> known = {"decoder_embed_dim",
                                 "decoder_value_embed_dim",
                                 "decoder_retention_heads",
                                 "decoder_ffn_embed_dim",
                                 "decoder_layers",
                                 "vocab_size",
                                 "recurrent_chunk_size",
                                 "no_scale_embedding",
                                 "layernorm_eps",
                                 "activation_fn",
                                 "decay",
                                 "deepnorm",
                                 "multiway",
                                 "layernorm_embedding",
                                 "share_decoder_input_output_embed",
                                 "decoder_normalize_before",
                                 "mixer",
                                 "key_embed_dim",
                                 "normalize_scores",
                                 "head_norm_weight",
                                 "output_gate",
                                 "rotary",
                                 "rope_theta",
                                 "kv_heads",
                                 "feature_map"};
  for (const MixerSpec* m : mixer_registry())
    if (m->options) known.insert(m->options->keys.begin(), m->options->keys.end());
  for (auto it = j.begin(); it != j.end(); ++it)
    RETNET_CHECK(known.count(it.key()) || kIgnoredTorchscaleFields.count(it.key()),
                 "{}: unknown field '{}'", origin, it.key());
  if (j.contains("moe_freq")) {
    RETNET_CHECK(json_int(j, "moe_freq", 0, origin) == 0,
                 "{}: mixture of experts (moe_freq) is "
                 "not supported",
                 origin);
  }
  refuse_unused_options(c, model_options, origin);
  c.validate();
  return c;
}

Config Config::from_file(const std::string& path) {
  return from_json(read_file(path, "config file"), path);
}

std::string Config::to_json(int indent) const {
  nlohmann::ordered_json j;
  j["decoder_embed_dim"] = embed_dim;
  j["decoder_value_embed_dim"] = value_embed_dim;
  j["decoder_retention_heads"] = heads;
  j["decoder_ffn_embed_dim"] = ffn_dim;
  j["decoder_layers"] = layers;
  j["vocab_size"] = vocab_size;
  j["layernorm_eps"] = layernorm_eps;
  j["activation_fn"] = activation_name(activation);
  j["no_scale_embedding"] = no_scale_embedding;
  j["recurrent_chunk_size"] = recurrent_chunk_size;
  j["decay"] = decay == DecaySchedule::Paper ? "paper" : "torchscale";
  // Written only when they matter, so retention configs stay torchscale's: each mixer's options
  // for a config that has the mixer; in a hybrid model, a layer's own options (attention's) in its
  // list entry, the others' (the same in every layer) at the top.
  std::vector<std::pair<const MixerSpec*, MixerOptionsPtr>> written;
  auto write_options = [&](const MixerSpec* m, const MixerOptionsPtr& options) {
    if (!m->options) return;
    for (const auto& e : written)
      if (e.first == m) return;
    written.emplace_back(m, options);
  };
  if (hybrid()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const LayerSpec& spec : layer_specs) {
      const detail::MixerOptionsCodec* codec = spec.mixer->options;
      if (codec == nullptr || codec->write_layer == nullptr) {
        write_options(spec.mixer, spec.options);
        list.push_back(spec.mixer->name);
        continue;
      }
      nlohmann::ordered_json e = {{"mixer", spec.mixer->name}};
      codec->write_layer(spec.options.get(), e);
      if (e.size() == 1)
        list.push_back(spec.mixer->name);
      else
        list.push_back(e);
    }
    j["mixer"] = list;
  } else {
    if (mixer != &default_mixer()) j["mixer"] = mixer->name;
    write_options(mixer, mixer_options);
  }
  for (const auto& [m, options] : written) m->options->write(options.get(), j);
  // Likewise the retention options, written only where they differ from torchscale's.
  if (key_embed_dim != 0 && key_embed_dim != embed_dim) j["key_embed_dim"] = key_embed_dim;
  if (rotary == RotaryStyle::HalfSplit) {
    j["rotary"] = "half_split";
    j["rope_theta"] = rope_theta;
  }
  if (!normalize_scores) j["normalize_scores"] = false;
  if (head_norm_weight) j["head_norm_weight"] = true;
  if (!output_gate) j["output_gate"] = false;
  if (kv_heads != 0 && kv_heads != heads) j["kv_heads"] = kv_heads;
  if (feature_map != QkFeatureMap::None) j["feature_map"] = qk_feature_map_name(feature_map);
  if (tie_embeddings) j["share_decoder_input_output_embed"] = true;
  return j.dump(indent);
}

}  // namespace retnet
