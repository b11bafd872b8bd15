#include "retnet/model/model.h"

#include <cmath>

#include "retnet/core/error.h"
#include "retnet/core/half.h"
#include "retnet/core/hash.h"
#include "retnet/core/rng.h"
#include "retnet/ops/rotation.h"

namespace retnet {

ParamLayout make_param_layout(const Config& c, ModelTensors* idx) {
  ParamLayout layout;
  ModelTensors t;
  const int64_t d = c.embed_dim, vd = c.value_embed_dim, f = c.ffn_dim;
  t.embed = layout.add("embed_tokens.weight", {c.vocab_size, d});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerTensors L;
    L.q_proj = layout.add(p + "retention.q_proj.weight", {d, d});
    L.k_proj = layout.add(p + "retention.k_proj.weight", {d, d});
    L.v_proj = layout.add(p + "retention.v_proj.weight", {vd, d});
    L.g_proj = layout.add(p + "retention.g_proj.weight", {vd, d});
    L.out_proj = layout.add(p + "retention.out_proj.weight", {d, vd});
    L.retention_norm = layout.add(p + "retention_layer_norm.weight", {d});
    L.fc1 = layout.add(p + "ffn.fc1.weight", {f, d});
    L.gate = layout.add(p + "ffn.gate.weight", {f, d});
    L.fc2 = layout.add(p + "ffn.fc2.weight", {d, f});
    L.final_norm = layout.add(p + "final_layer_norm.weight", {d});
    t.layers.push_back(L);
  }
  t.final_norm = layout.add("layer_norm.weight", {d});
  t.output_projection = layout.add("output_projection.weight", {c.vocab_size, d});
  if (idx) *idx = t;
  return layout;
}

Model::Model(const Config& config, ParamBuffer params) : config_(config), params_(std::move(params)) {
  config_.validate();
  ParamLayout expected = make_param_layout(config_, &tensors_);
  RETNET_CHECK(params_.layout().size() == expected.size() &&
                   params_.size() == expected.total_floats(),
               "parameter buffer does not match the config ({} tensors, {} floats; expected {}, {})",
               params_.layout().size(), params_.size(), expected.size(), expected.total_floats());
  for (size_t i = 0; i < expected.size(); ++i)
    RETNET_CHECK(params_.layout()[i].name == expected[i].name &&
                     params_.layout()[i].offset == expected[i].offset,
                 "parameter layout mismatch at '{}'", expected[i].name);
  for (int64_t h = 0; h < config_.heads; ++h) gammas_.push_back(config_.gamma(h));
  thetas_ = rotation_thetas(config_.key_dim());
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
  for (const auto& L : t.layers) {
    for (size_t i : {L.q_proj, L.k_proj, L.v_proj, L.g_proj}) xavier(i, std::pow(2.0, -2.5));
    xavier(L.out_proj, 0.5);
    uniform(L.fc1, 1.0 / std::sqrt(d));
    uniform(L.gate, 1.0 / std::sqrt(d));
    uniform(L.fc2, 1.0 / std::sqrt(static_cast<double>(config.ffn_dim)));
    ones(L.retention_norm);
    ones(L.final_norm);
  }
  return Model(config, std::move(params));
}

void Model::set_f16_decode(bool on) {
  if (!on) {
    f16_.reset();
    return;
  }
  auto copy = std::make_shared<std::vector<uint16_t>>(params_.size());
  const float* p = params_.data();
  uint16_t* h = copy->data();
  int64_t overflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : overflow)
  for (size_t i = 0; i < params_.size(); ++i) {
    h[i] = float_to_half(p[i]);
    overflow += (h[i] & 0x7c00u) == 0x7c00u;
  }
  RETNET_CHECK(overflow == 0, "{} weights lie outside the f16 range (|w| > 65504): decode in f32",
               overflow);
  f16_ = std::move(copy);
}

uint64_t model_fingerprint(const Model& model) {
  const std::string config = model.config().to_json();
  uint64_t h = fnv1a(config.data(), config.size());
  return fnv1a(model.params().data(), model.params().size() * sizeof(float), h);
}

}  // namespace retnet
