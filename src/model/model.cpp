#include "retnet/model/model.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/hash.h"
#include "retnet/core/rng.h"
#include "retnet/ops/rotation.h"

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
      L.mixer_tensors.push_back(t.present && !t.present(c) ? kNoTensor
                                                           : layout.add(p + s + "." + t.name,
                                                                        t.shape(c), t.weight_decay));
    L.mixer_norm = layout.add(p + s + "_layer_norm.weight", {d});
    L.fc1 = layout.add(p + "ffn.fc1.weight", {f, d}, true);
    L.gate = layout.add(p + "ffn.gate.weight", {f, d}, true);
    L.fc2 = layout.add(p + "ffn.fc2.weight", {d, f}, true);
    L.final_norm = layout.add(p + "final_layer_norm.weight", {d});
    t.layers.push_back(L);
  }
  t.final_norm = layout.add("layer_norm.weight", {d});
  t.output_projection = layout.add("output_projection.weight", {config.vocab_size, d}, true);
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
    return c.rotary == RotaryStyle::HalfSplit ? half_split_rotation_thetas(c.key_dim(), c.rope_theta)
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
  normal(t.output_projection, std::pow(d, -0.5));
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

struct DecodePack {
  DecodePrecision precision;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::unordered_map<size_t, PackedProjection> by_tensor;
};

void Model::prepare_decode(DecodePrecision precision) {
  const Config& c = config_;
  const int64_t d = c.embed_dim, F = c.ffn_dim;
  // The products of a decode step: q|k|v|g, out, fc1|gate, fc2, and the LM head.
  std::vector<std::tuple<size_t, int64_t, int64_t>> products;
  for (size_t l = 0; l < tensors_.layers.size(); ++l) {
    const LayerTensors& L = tensors_.layers[l];
    const Config& lc = layer_config(static_cast<int64_t>(l));
    products.emplace_back(L.q_proj, lc.projection_width(), d);
    products.emplace_back(L.out_proj, d, lc.value_embed_dim);
    products.emplace_back(L.fc1, 2 * F, d);
    products.emplace_back(L.fc2, d, F);
  }
  products.emplace_back(tensors_.output_projection, c.vocab_size, d);
  auto pack = std::make_shared<DecodePack>();
  pack->precision = precision;
  size_t total = 0;
  for (auto [index, N, K] : products) total += packed_weight_elements(N, K);
  if (precision == DecodePrecision::F32)
    pack->f32.resize(total);
  else
    pack->f16.resize(total);
  size_t offset = 0;
  for (auto [index, N, K] : products) {
    PackedProjection p{N, K, nullptr, nullptr};
    const float* w = params_.tensor(index);
    if (precision == DecodePrecision::F32) {
      pack_weights(w, N, K, K, pack->f32.data() + offset);
      p.f32 = pack->f32.data() + offset;
    } else {
      for (int64_t i = 0; i < N * K; ++i)
        RETNET_CHECK(std::fabs(w[i]) <= 65504.f,
                     "weight {} of '{}' is {}: outside the f16 range; decode in f32", i,
                     params_.layout()[index].name, w[i]);
      pack_weights_f16(w, N, K, K, pack->f16.data() + offset);
      p.f16 = pack->f16.data() + offset;
    }
    pack->by_tensor[index] = p;
    offset += packed_weight_elements(N, K);
  }
  packed_ = std::move(pack);
}

DecodePrecision Model::decode_precision() const {
  return packed_ ? packed_->precision : DecodePrecision::F32;
}

const PackedProjection* Model::packed(size_t index) const {
  if (!packed_) return nullptr;
  auto it = packed_->by_tensor.find(index);
  return it == packed_->by_tensor.end() ? nullptr : &it->second;
}

uint64_t model_fingerprint(const Model& model) {
  const std::string config = model.config().to_json();
  uint64_t h = fnv1a(config.data(), config.size());
  return fnv1a(model.params().data(), model.params().size() * sizeof(float), h);
}

}  // namespace retnet
