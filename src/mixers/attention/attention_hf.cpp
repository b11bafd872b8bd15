// Softmax attention in the Hugging Face layouts: the layers of fla's hybrid RetNets (its "attn"
// key); syncdoth's RetNet has none.
#include <algorithm>
#include <memory>
#include <set>

#include "../../model/json_fields.h"
#include "attention_options.h"
#include "retnet/core/error.h"
#include "retnet/model/hf_layout.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::detail {
namespace {

using nlohmann::json;

// fla's "attn": {"layers": [...], "num_heads", "num_kv_heads", "qkv_bias", "rope_theta",
// "window_size"} (or a list of such objects) makes those layers softmax attention over head dim
// hidden / num_heads, with q, o: hidden x hidden and k, v: num_kv_heads * head dim x hidden.
void read_fla_attention_layers(const json& j, Config& c, const std::string& origin) {
  if (!j.contains("attn") || hf_is_neutral(j["attn"])) return;
  const json& attn = j["attn"];
  RETNET_CHECK(attn.is_object() || attn.is_array(),
               "{}: 'attn' = {} must be null, an object or a list of objects", origin, attn.dump());
  const json specs = attn.is_array() ? attn : json::array({attn});
  const MixerSpec& base = hf_base_mixer(HfFlavour::Fla);
  if (!c.hybrid()) c.layer_specs.assign(static_cast<size_t>(c.layers), {&base, c.mixer_options});
  static const std::set<std::string> known = {"layers",  "num_heads",  "num_kv_heads", "qkv_bias",
                                              "qk_norm", "rope_theta", "window_size"};
  for (const json& s : specs) {
    RETNET_CHECK(
        s.is_object() && s.contains("layers") && s["layers"].is_array() && s.contains("num_heads"),
        "{}: 'attn' entry {} needs 'layers' (a list) and 'num_heads'", origin, s.dump());
    for (auto it = s.begin(); it != s.end(); ++it)
      RETNET_CHECK(known.count(it.key()) || hf_is_neutral(it.value()),
                   "{}: 'attn.{}' = {} is not supported", origin, it.key(), it.value().dump());
    hf_refuse_unless_neutral(s, "qk_norm", origin + ": attn", "q/k norms are not implemented");
    auto options = std::make_shared<AttentionOptions>();
    AttentionOptions& a = *options;
    a.heads = hf_positive_int(s, "num_heads", origin + ": attn");
    if (s.contains("num_kv_heads") && !s["num_kv_heads"].is_null()) {
      const int64_t kv = hf_positive_int(s, "num_kv_heads", origin + ": attn");
      a.kv_heads = kv == a.heads ? 0 : kv;
    }
    a.value_dim = c.embed_dim;
    a.qkv_bias = json_bool(s, "qkv_bias", false, origin + ": attn");
    const double theta = json_number(s, "rope_theta", 10000.0, origin + ": attn");
    a.rope_theta = theta == c.rope_theta ? 0 : theta;
    a.window_size = json_int(s, "window_size", 0, origin + ": attn");
    RETNET_CHECK(!s.contains("window_size") || s["window_size"].is_null() || a.window_size > 0,
                 "{}: 'attn.window_size' = {} must be null or positive", origin,
                 s["window_size"].dump());
    for (const json& l : s["layers"]) {
      RETNET_CHECK(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < c.layers &&
                       c.layer_specs[l.get<size_t>()].mixer == &base,
                   "{}: 'attn.layers' entry {} is not a layer in [0, {}) or is repeated", origin,
                   l.dump(), c.layers);
      c.layer_specs[l.get<size_t>()] = {&attention_mixer_spec(), options};
    }
  }
}

// The "attn" of a hybrid model (null without attention layers): one object per distinct set of
// attention options, a list where there are several.
void write_fla_attention_layers(const Config& c, nlohmann::ordered_json& j,
                                const HfRefuse& refuse) {
  std::vector<std::pair<AttentionOptions, std::vector<int64_t>>> groups;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (&c.layer_mixer(l) != &attention_mixer_spec()) continue;
    const Config lc = c.layer(l);
    refuse(lc.value_embed_dim != c.embed_dim,
           "attention value width apart from hidden_size (attention.value_dim)");
    const AttentionOptions& a = mixer_options<AttentionOptions>(lc);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == a; });
    if (it == groups.end())
      groups.push_back({a, {l}});
    else
      it->second.push_back(l);
  }
  if (groups.empty()) {
    j["attn"] = nullptr;
    return;
  }
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
  j["attn"] = list.size() == 1 ? list[0] : list;
}

}  // namespace

// syncdoth's RetNet has no attention layers: no role there.
const HfMixerLayout& attention_hf_layout() {
  static const HfMixerLayout layout{.fla = {.role = HfRole::Hybrid,
                                            .names = {{"q_proj.weight"},
                                                      {"k_proj.weight"},
                                                      {"v_proj.weight"},
                                                      {"out_proj.weight", "o_proj.weight"},
                                                      {"q_proj.bias"},
                                                      {"k_proj.bias"},
                                                      {"v_proj.bias"}},
                                            .keys = {"attn"},
                                            .read = read_fla_attention_layers,
                                            .write = write_fla_attention_layers},
                                    .syncdoth = {}};
  return layout;
}

}  // namespace retnet::detail
