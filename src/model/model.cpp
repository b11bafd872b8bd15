#include "retnet/model/model.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/hash.h"
#include "retnet/core/rng.h"
#include "retnet/mixers/feature_maps.h"
#include "retnet/ops/rotation.h"

namespace retnet {

std::string mixer_scope(MixerKind kind) {
  std::string s = mixer_name(kind);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

ParamLayout make_param_layout(const Config& c, ModelTensors* idx) {
  ParamLayout layout;
  ModelTensors t;
  const int64_t d = c.embed_dim, vd = c.value_embed_dim, f = c.ffn_dim;
  t.embed = layout.add("embed_tokens.weight", {c.vocab_size, d});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerTensors L;
    const std::string s = mixer_scope(c.mixer);
    const int64_t qk_rows = mixer_is_channelwise(c.mixer) ? vd : d;
    L.q_proj = layout.add(p + s + ".q_proj.weight", {qk_rows, d});
    L.k_proj = layout.add(p + s + ".k_proj.weight", {qk_rows, d});
    L.v_proj = layout.add(p + s + ".v_proj.weight", {vd, d});
    if (c.mixer == MixerKind::Retention) L.g_proj = layout.add(p + s + ".g_proj.weight", {vd, d});
    L.out_proj = layout.add(p + s + ".out_proj.weight", {d, vd});
    if (c.mixer == MixerKind::Performer)
      L.extra[0] = layout.add(p + s + ".feature_matrix", {c.performer_features, c.key_dim()});
    if (c.mixer == MixerKind::Aft)
      L.extra[0] = layout.add(p + s + ".pos_bias", {c.aft_max_distance});
    if (c.mixer == MixerKind::Rwkv) {
      L.extra[0] = layout.add(p + s + ".time_decay", {vd});
      L.extra[1] = layout.add(p + s + ".time_first", {vd});
    }
    L.mixer_norm = layout.add(p + s + "_layer_norm.weight", {d});
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
  thetas_ = rotation_thetas(config_.key_dim());
}

namespace {

// The tensors some mixers have besides their projections.
void init_mixer_extras(const Config& c, const LayerTensors& L, int64_t layer, uint64_t seed,
                       ParamBuffer& params) {
  const int64_t vd = c.value_embed_dim;
  if (c.mixer == MixerKind::Performer) {
    // Each layer its own random matrix, a pure function of (seed, layer): stored in the model
    // file, so every form and every later run uses the same one.
    const uint64_t matrix_seed = seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(layer + 1));
    std::vector<float> w = favor_random_matrix(matrix_seed, c.performer_features, c.key_dim());
    std::copy(w.begin(), w.end(), params.tensor(L.extra[0]));
  }
  if (c.mixer == MixerKind::Aft)  // zero biases: at first every earlier token counts by its key
    std::fill_n(params.tensor(L.extra[0]), c.aft_max_distance, 0.f);
  if (c.mixer == MixerKind::Rwkv) {
    // RWKV-4's initialisation: decay rates exp(time_decay) spread from exp(-5) (long memory) to
    // exp(3) (the last token only) across channels, faster in deeper layers; the current
    // token's bonus around log(0.3) with a zigzag across channels.
    const double ratio = c.layers > 1 ? static_cast<double>(layer) / (c.layers - 1) : 0.0;
    float* decay = params.tensor(L.extra[0]);
    float* first = params.tensor(L.extra[1]);
    for (int64_t i = 0; i < vd; ++i) {
      const double x = vd > 1 ? static_cast<double>(i) / (vd - 1) : 0.0;
      decay[i] = static_cast<float>(-5.0 + 8.0 * std::pow(x, 0.7 + 1.3 * ratio));
      first[i] = static_cast<float>(std::log(0.3) + 0.5 * ((i + 1) % 3 - 1));
    }
  }
}

}  // namespace

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
    for (size_t i : {L.q_proj, L.k_proj, L.v_proj, L.g_proj})
      if (i != kNoTensor) xavier(i, std::pow(2.0, -2.5));
    xavier(L.out_proj, 0.5);
    init_mixer_extras(config, L, static_cast<int64_t>(l), seed, params);
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
  const int64_t d = c.embed_dim, vd = c.value_embed_dim, F = c.ffn_dim;
  // The products of a decode step: q|k|v|g, out, fc1|gate, fc2, and the LM head.
  std::vector<std::tuple<size_t, int64_t, int64_t>> products;
  for (const LayerTensors& L : tensors_.layers) {
    products.emplace_back(L.q_proj, c.projection_width(), d);
    products.emplace_back(L.out_proj, d, vd);
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
