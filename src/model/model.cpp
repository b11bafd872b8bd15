#include "retnet/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/quant.h"
#include "retnet/core/rng.h"
#include "retnet/ops/rotation.h"
#include "weight_packer.h"

namespace retnet {

ParamLayout make_param_layout(const Config& config, ModelTensors* idx) {
  ParamLayout layout;
  ModelTensors t;
  const int64_t d = config.embed_dim, f = config.ffn_dim;
  t.embed = layout.add("embed_tokens.weight", {config.vocab_size, d});
  for (int64_t l = 0; l < config.layers; ++l) {
    const Config c = config.layer(l);  // a hybrid model's layers have their own widths
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerTensors L;
    const MixerSpec& m = *c.mixer;
    const std::string s = m.scope;
    const int64_t vd = c.value_embed_dim;
    // Matrices take weight decay; norms, embeddings and the mixer's own tensors (by its spec) not.
    // kv_heads < heads: k and v have fewer rows (one head per group of query heads).
    const int64_t q_rows = m.per_channel ? vd : c.qk_width();
    const int64_t k_rows = m.per_channel ? vd : c.k_width();
    const int64_t v_rows = m.per_channel ? vd : c.v_width();
    L.q_proj = layout.add(p + s + ".q_proj.weight", {q_rows, d}, true);
    L.k_proj = layout.add(p + s + ".k_proj.weight", {k_rows, d}, true);
    L.v_proj = layout.add(p + s + ".v_proj.weight", {v_rows, d}, true);
    if (c.gated()) L.g_proj = layout.add(p + s + ".g_proj.weight", {vd, d}, true);
    L.out_proj = layout.add(p + s + ".out_proj.weight", {d, vd}, true);
    for (const MixerTensor& t : m.tensors)
      L.mixer_tensors.push_back(t.present && !t.present(c)
                                    ? kNoTensor
                                    : layout.add(p + s + "." + t.name, t.shape(c), t.weight_decay));
    L.mixer_norm = layout.add(p + s + "_layer_norm.weight", {d});
    L.fc1 = layout.add(p + "ffn.fc1.weight", {f, d}, true);
    L.gate = layout.add(p + "ffn.gate.weight", {f, d}, true);
    L.fc2 = layout.add(p + "ffn.fc2.weight", {d, f}, true);
    L.final_norm = layout.add(p + "final_layer_norm.weight", {d});
    t.layers.push_back(L);
  }
  t.final_norm = layout.add("layer_norm.weight", {d});
  // A tied head is the embedding itself: one tensor, and gradients of both uses add up in it.
  t.output_projection = config.tie_embeddings
                            ? t.embed
                            : layout.add("output_projection.weight", {config.vocab_size, d}, true);
  if (idx) *idx = t;
  return layout;
}

Model::Model(const Config& config, ParamBuffer params)
    : config_(config), params_(std::move(params)) {
  config_.validate();
  ParamLayout expected = make_param_layout(config_, &tensors_);
  RETNET_CHECK(
      params_.layout().size() == expected.size() && params_.size() == expected.total_floats(),
      "parameter buffer does not match the config ({} tensors, {} floats; expected {}, {})",
      params_.layout().size(), params_.size(), expected.size(), expected.total_floats());
  for (size_t i = 0; i < expected.size(); ++i)
    RETNET_CHECK(params_.layout()[i].name == expected[i].name &&
                     params_.layout()[i].offset == expected[i].offset,
                 "parameter layout mismatch at '{}'", expected[i].name);
  for (int64_t h = 0; h < config_.heads; ++h) gammas_.push_back(config_.gamma(h));
  auto thetas_of = [](const Config& c) {
    return c.rotary == RotaryStyle::HalfSplit
               ? half_split_rotation_thetas(c.key_dim(), c.rope_theta)
               : rotation_thetas(c.key_dim());
  };
  thetas_ = thetas_of(config_);
  // Layers with the same rotation share one table (the layer loop rotates once per table).
  auto shared = std::make_shared<const std::vector<double>>(thetas_);
  int64_t offset = 0, slots = 0;
  for (int64_t l = 0; l < config_.layers; ++l) {
    const Config& c = layer_configs_.emplace_back(config_.layer(l));
    std::vector<double> th = thetas_of(c);
    if (th != *shared) shared = std::make_shared<const std::vector<double>>(std::move(th));
    layer_thetas_.push_back(shared);
    state_offsets_.push_back(offset);
    if (c.mixer->state_floats_per_layer) offset += c.mixer->state_floats_per_layer(c);
    cache_slots_.push_back(c.mixer->cache_floats_per_token_per_layer ? slots++ : -1);
  }
  plain_ = WeightPacker::plain_weights(*this);
}

Model Model::init(const Config& config, uint64_t seed) {
  config.validate();
  ModelTensors t;
  ParamLayout layout = make_param_layout(config, &t);
  ParamBuffer params(layout);
  Philox rng(seed);
  // Stream = tensor index, counter = element index: independent of threads and of evaluation order.
  auto fill = [&](size_t index, auto draw) {
    float* w = params.tensor(index);
    const int64_t n = static_cast<int64_t>(layout[index].numel);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(draw(index, i));
  };
  auto normal = [&](size_t index, double std) {
    fill(index, [&](size_t s, int64_t i) { return std * rng.normal(s, i); });
  };
  auto uniform = [&](size_t index, double bound) {
    fill(index, [&](size_t s, int64_t i) { return bound * (2.0 * rng.uniform(s, i) - 1.0); });
  };
  auto xavier = [&](size_t index, double gain) {
    const auto& shape = layout[index].shape;  // [out, in]
    uniform(index, gain * std::sqrt(6.0 / static_cast<double>(shape[0] + shape[1])));
  };
  auto ones = [&](size_t index) { fill(index, [](size_t, int64_t) { return 1.0; }); };
  const double d = static_cast<double>(config.embed_dim);
  normal(t.embed, std::pow(d, -0.5));
  if (t.output_projection != t.embed) normal(t.output_projection, std::pow(d, -0.5));
  ones(t.final_norm);
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTensors& L = t.layers[l];
    const Config lc = config.layer(static_cast<int64_t>(l));
    for (size_t i : {L.q_proj, L.k_proj, L.v_proj, L.g_proj})
      if (i != kNoTensor) xavier(i, std::pow(2.0, -2.5));
    xavier(L.out_proj, 0.5);
    const std::vector<MixerTensor>& own = lc.mixer->tensors;
    for (size_t i = 0; i < own.size(); ++i)
      if (L.mixer_tensors[i] != kNoTensor)
        own[i].init(lc, static_cast<int64_t>(l), seed, params.tensor(L.mixer_tensors[i]),
                    static_cast<int64_t>(layout[L.mixer_tensors[i]].numel));
    uniform(L.fc1, 1.0 / std::sqrt(d));
    uniform(L.gate, 1.0 / std::sqrt(d));
    uniform(L.fc2, 1.0 / std::sqrt(static_cast<double>(config.ffn_dim)));
    ones(L.mixer_norm);
    ones(L.final_norm);
  }
  return Model(config, std::move(params));
}

DecodePrecision parse_decode_precision(const std::string& name, const std::string& option) {
  if (name == "f32") return DecodePrecision::F32;
  if (name == "bf16") return DecodePrecision::BF16;
  if (name == "f16") return DecodePrecision::F16;
  if (name == "q8_0") return DecodePrecision::Q8_0;
  if (name == "q4_0") return DecodePrecision::Q4_0;
  if (name == "q4_1") return DecodePrecision::Q4_1;
  throw Error(
      fmt::format("{}: '{}' is not a weight dtype (expected f32, bf16, f16, q8_0, q4_0 or q4_1)",
                  option, name));
}

std::optional<QuantType> decode_quant_type(DecodePrecision precision) {
  switch (precision) {
    case DecodePrecision::Q8_0:
      return QuantType::Q8_0;
    case DecodePrecision::Q4_0:
      return QuantType::Q4_0;
    case DecodePrecision::Q4_1:
      return QuantType::Q4_1;
    default:
      return std::nullopt;
  }
}

DecodePrecision decode_precision_of(QuantType type) {
  switch (type) {
    case QuantType::Q8_0:
      return DecodePrecision::Q8_0;
    case QuantType::Q4_0:
      return DecodePrecision::Q4_0;
    default:
      return DecodePrecision::Q4_1;
  }
}

ElementType decode_element_type(DecodePrecision precision) {
  switch (precision) {
    case DecodePrecision::F16:
      return ElementType::F16;
    case DecodePrecision::BF16:
      return ElementType::BF16;
    case DecodePrecision::Q8_0:
      return ElementType::Q8_0;
    case DecodePrecision::Q4_0:
      return ElementType::Q4_0;
    case DecodePrecision::Q4_1:
      return ElementType::Q4_1;
    default:
      return ElementType::F32;
  }
}

double decode_precision_bits(DecodePrecision precision) {
  if (const auto type = decode_quant_type(precision)) return quant_bits_per_weight(*type);
  return 8.0 * static_cast<double>(decode_precision_bytes(precision));
}

const char* decode_precision_name(DecodePrecision precision) {
  if (const auto type = decode_quant_type(precision)) return quant_type_name(*type);
  switch (precision) {
    case DecodePrecision::F16:
      return "f16";
    case DecodePrecision::BF16:
      return "bf16";
    default:
      return "f32";
  }
}

int64_t decode_precision_bytes(DecodePrecision precision) {
  if (decode_quant_type(precision)) return 1;
  return precision == DecodePrecision::F32 ? 4 : 2;
}

uint64_t model_fingerprint(const Model& model) {
  if (const WeightStore* prepared = model.prepared_.get()) {
    if (const auto& lazy = prepared->lazy) {
      std::call_once(lazy->once, [&] { lazy->value = lazy->compute(); });
      return lazy->value;
    }
    if (!prepared->released.empty()) return prepared->fingerprint;
  }
  const std::string config = model.config().to_json();
  uint64_t h = fnv1a(config.data(), config.size());
  return fnv1a(model.params().data(), model.params().size() * sizeof(float), h);
}

}  // namespace retnet
