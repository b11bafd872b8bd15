// Retention in the Hugging Face layouts: the base mixer of fla's RetNet (its MultiScaleRetention
// keys and names) and of syncdoth's (torchscale's keys, which the engine's config JSON reads).
#include "../../model/json_fields.h"
#include "retnet/core/error.h"
#include "retnet/model/hf_layout.h"

namespace retnet::detail {
namespace {

using nlohmann::json;

void read_fla_retention(const json& j, Config& c, const std::string& origin) {
  c.heads = hf_positive_int(j, "num_heads", origin);
  if (j.contains("num_kv_heads") && !j["num_kv_heads"].is_null()) {
    const int64_t kv = hf_positive_int(j, "num_kv_heads", origin);
    RETNET_CHECK(kv <= c.heads && c.heads % kv == 0,
                 "{}: 'num_kv_heads' = {} does not divide 'num_heads' = {}", origin, kv, c.heads);
    c.kv_heads = kv == c.heads ? 0 : kv;
  }
  c.feature_map = json_feature_map(j, "feature_map", c.feature_map, origin);
  c.key_embed_dim =
      hf_expanded(c.embed_dim, json_number(j, "expand_k", 1.0, origin), "expand_k", origin);
  c.value_embed_dim =
      hf_expanded(c.embed_dim, json_number(j, "expand_v", 2.0, origin), "expand_v", origin);
  if (c.key_embed_dim == c.embed_dim) c.key_embed_dim = 0;
  c.head_norm_weight = json_bool(j, "elementwise_affine", true, origin);
  c.output_gate = json_bool(j, "use_output_gate", true, origin);
  c.normalize_scores = false;
  c.decay = DecaySchedule::Torchscale;
}

void write_fla_retention(const Config& c, nlohmann::ordered_json& j, const HfRefuse& refuse) {
  refuse(c.normalize_scores, "score normalisation (fla's retention has none)");
  refuse(c.decay != DecaySchedule::Torchscale, "decay schedule (fla uses 1 - 2^(-5-h))");
  refuse(c.key_dim() > 256, "key dim per head above 256");
  const double d = static_cast<double>(c.embed_dim);
  j["num_heads"] = c.heads;
  if (c.kv_heads != 0 && c.kv_heads != c.heads)
    j["num_kv_heads"] = c.kv_heads;
  else
    j["num_kv_heads"] = nullptr;
  j["expand_k"] = static_cast<double>(c.qk_width()) / d;
  j["expand_v"] = static_cast<double>(c.value_embed_dim) / d;
  j["use_output_gate"] = c.output_gate;
  j["elementwise_affine"] = c.head_norm_weight;
  if (c.feature_map != QkFeatureMap::None)
    j["feature_map"] = qk_feature_map_name(c.feature_map);
  else
    j["feature_map"] = nullptr;
  // expand_k and expand_v must give the widths back through int(hidden * ratio).
  refuse(static_cast<int64_t>(d * (static_cast<double>(c.qk_width()) / d)) != c.qk_width() ||
             static_cast<int64_t>(d * (static_cast<double>(c.value_embed_dim) / d)) !=
                 c.value_embed_dim,
         "q/k or value width (not an exact multiple of hidden_size)");
}

// syncdoth's use_lm_decay is the engine's decay "paper"; its other keys are the config's own.
void read_syncdoth_retention(const json& j, Config& c, const std::string& origin) {
  if (json_bool(j, "use_lm_decay", false, origin)) c.decay = DecaySchedule::Paper;
}

void write_syncdoth_retention(const Config& c, nlohmann::ordered_json& j, const HfRefuse& refuse) {
  refuse(!c.normalize_scores, "retention without score normalisation");
  refuse(c.head_norm_weight, "head norm weight");
  refuse(!c.output_gate, "retention without output gate");
  refuse(c.qk_width() != c.embed_dim, "q/k width apart from decoder_embed_dim");
  refuse(c.kv_heads != 0 && c.kv_heads != c.heads,
         "kv_heads (keys and values shared by groups of heads)");
  refuse(c.feature_map != QkFeatureMap::None, "feature_map (a feature map of q and k)");
  j.erase("decay");
  j["use_lm_decay"] = c.decay == DecaySchedule::Paper;
}

}  // namespace

const HfMixerLayout& retention_hf_layout() {
  static const HfMixerLayout layout{
      .fla = {.role = HfRole::Base,
              .names = {{"q_proj.weight"},
                        {"k_proj.weight"},
                        {"v_proj.weight"},
                        {"g_proj.weight"},
                        {"out_proj.weight", "o_proj.weight"},
                        // fla writes the head norm without the fused gate as g_norm (fuse_norm
                        // false, or no output gate).
                        {"head_norm.weight", "g_norm_swish_gate.weight", "g_norm.weight"}},
              .keys = {"num_heads", "num_kv_heads", "expand_k", "expand_v", "elementwise_affine",
                       "use_output_gate", "feature_map"},
              .read = read_fla_retention,
              .write = write_fla_retention},
      .syncdoth = {.role = HfRole::Base,
                   .keys = {"use_lm_decay"},
                   .read = read_syncdoth_retention,
                   .write = write_syncdoth_retention}};
  return layout;
}

}  // namespace retnet::detail
