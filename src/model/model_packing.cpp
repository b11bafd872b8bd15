// Model's inference preparation (retnet/model/model.h): which weights it keeps, what was released,
// and the errors about them. The one pass that builds them is weight_packer.cpp.
#include <algorithm>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/mapped_file.h"
#include "retnet/model/model.h"
#include "weight_packer.h"

namespace retnet {

void Model::prepare_inference(const LoadPlan& plan) { WeightPacker(*this).prepare(plan); }

void Model::prepare_decode(DecodePrecision precision) {
  LoadPlan plan(precision);
  plan.keep_float32 = true;
  prepare_inference(plan);
}

int64_t Model::in_place_bytes() const { return prepared_ ? prepared_->in_place_bytes : 0; }

bool Model::fingerprint_deferred() const { return prepared_ && prepared_->lazy; }

bool Model::weights_complete() const { return !prepared_ || prepared_->released.empty(); }

bool Model::released(size_t index) const {
  return prepared_ && !prepared_->released.empty() && prepared_->released[index];
}

const float* Model::param(size_t index) const {
  if (released(index)) throw_released(index);
  return params_.tensor(index);
}

std::vector<std::pair<size_t, int64_t>> Model::projection_tensors() const {
  const ParamLayout& layout = params_.layout();
  std::vector<std::pair<size_t, int64_t>> out;
  for (auto [index, N, K] : WeightPacker::products(*this)) {
    const size_t end = layout[index].offset + static_cast<size_t>(N * K);
    for (size_t i = index; i < layout.size() && layout[i].offset < end; ++i) out.emplace_back(i, K);
  }
  return out;
}

bool Model::head_kept_f32() const { return prepared_ && prepared_->head_f32; }

DecodePrecision Model::decode_precision() const {
  return prepared_ ? prepared_->precision : DecodePrecision::F32;
}

int64_t Model::packed_bytes() const {
  if (!prepared_) return 0;
  return static_cast<int64_t>(prepared_->f32.size() * sizeof(float) +
                              prepared_->f16.size() * sizeof(uint16_t) +
                              prepared_->bf16.size() * sizeof(BFloat16) + prepared_->quant.size());
}

void Model::require_complete_weights(const std::string& what) const {
  if (!weights_complete() && decode_quant_type(decode_precision()))
    throw Error(fmt::format(
        "{} needs the float32 weights, but this model's projections are quantised ({}): their "
        "float32 values were released or never stored; use the float32 model",
        what, decode_precision_name(decode_precision())));
  RETNET_CHECK(weights_complete(),
               "{} needs the float32 weights, but this model was prepared for inference in {}: "
               "its float32 projections were released (load the model again without preparing "
               "it for inference)",
               what, decode_precision_name(decode_precision()));
}

void Model::throw_released(size_t index) const {
  throw Error(fmt::format(
      "parameter '{}' was released when the model was prepared for inference in {} (only its "
      "packed copy remains): training, saving and exporting need a model loaded without it",
      params_.layout()[index].name, decode_precision_name(decode_precision())));
}

const Weight& Model::weight(size_t index) const {
  if (prepared_)
    if (auto it = prepared_->by_tensor.find(index); it != prepared_->by_tensor.end())
      return it->second;
  const auto it = plain_->by_tensor.find(index);
  RETNET_CHECK(
      it != plain_->by_tensor.end(),
      "tensor '{}' is not a projection's first tensor or the embedding: no product or "
      "lookup reads it as a weight",
      index < params_.layout().size() ? params_.layout()[index].name : std::to_string(index));
  if (released(index)) throw_released(index);
  return it->second;
}

}  // namespace retnet
