// Model's inference preparation (retnet/model/model.h): which weights it keeps, what was released,
// and the errors about them. The packing itself is weight_packer.cpp.
#include <algorithm>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/mapped_file.h"
#include "retnet/model/model.h"
#include "decode_pack.h"
#include "weight_packer.h"

namespace retnet {

void Model::prepare_decode(DecodePrecision precision) {
  require_complete_weights("preparing the weights again");
  WeightPacker(*this).pack(precision, false);
}

void Model::prepare_inference(DecodePrecision precision, const TensorSource& source) {
  WeightPacker(*this).fill_and_pack(precision, source, nullptr, nullptr);
}

void Model::prepare_inference(DecodePrecision precision, const TensorSource& source,
                              const InPlaceSource& in_place,
                              std::shared_ptr<const void> keep_alive) {
  WeightPacker(*this).fill_and_pack(precision, source, in_place, std::move(keep_alive));
}

int64_t Model::in_place_bytes() const { return packed_ ? packed_->in_place_bytes : 0; }

std::vector<std::pair<size_t, int64_t>> Model::projection_tensors() const {
  const ParamLayout& layout = params_.layout();
  std::vector<std::pair<size_t, int64_t>> out;
  for (auto [index, N, K] : WeightPacker::products(*this)) {
    const size_t end = layout[index].offset + static_cast<size_t>(N * K);
    for (size_t i = index; i < layout.size() && layout[i].offset < end; ++i) out.emplace_back(i, K);
  }
  return out;
}

bool Model::head_kept_f32() const { return packed_ && packed_->head_f32; }

void Model::prepare_inference(DecodePrecision precision, const QuantOptions& quant) {
  require_complete_weights("preparing the weights again");
  RETNET_CHECK(!quant.stored || decode_quant_type(precision),
               "stored quantised tensors need a quantised precision, not {}",
               decode_precision_name(precision));
  if (!params_.sole_holder() && !quant.stored) {  // a copy shares the storage: keep it intact
    WeightPacker(*this).pack(precision, false, quant);
    return;
  }
  if (quant.stored) {
    // The float32 buffer holds no values for the stored tensors (never written: reading them
    // would read gigabytes of zero pages): the other tensors and the stored blocks identify it.
    const std::string config = config_.to_json();
    const ParamLayout& layout = params_.layout();
    fingerprint_ = fnv1a(config.data(), config.size());
    for (size_t i = 0; i < layout.size(); ++i)
      if (!quant.stored->count(i))
        fingerprint_ = fnv1a(params_.tensor(i), layout[i].numel * sizeof(float), fingerprint_);
    for (const auto& [index, bytes] : *quant.stored) {
      fingerprint_ = fnv1a(bytes.data, bytes.size, fingerprint_ ^ index);
      if (quant.stored_mapped) release_mapped(bytes.data, bytes.size);
    }
  } else {
    fingerprint_ = model_fingerprint(*this);
  }
  released_.assign(params_.layout().size(), false);
  try {
    // Reads the originals through params_, not param().
    WeightPacker(*this).pack(precision, true, quant);
  } catch (...) {  // refused before releasing anything (a width not a multiple of 32): unchanged
    if (std::none_of(released_.begin(), released_.end(), [](bool r) { return r; }))
      released_.clear();
    throw;
  }
}

DecodePrecision Model::decode_precision() const {
  return packed_ ? packed_->precision : DecodePrecision::F32;
}

int64_t Model::packed_bytes() const {
  if (!packed_) return 0;
  return static_cast<int64_t>(packed_->f32.size() * sizeof(float) +
                              packed_->f16.size() * sizeof(uint16_t) +
                              packed_->bf16.size() * sizeof(BFloat16) + packed_->quant.size());
}

void Model::require_complete_weights(const std::string& what) const {
  if (!released_.empty() && decode_quant_type(decode_precision()))
    throw Error(fmt::format(
        "{} needs the float32 weights, but this model's projections are quantised ({}): their "
        "float32 values were released or never stored; use the float32 model",
        what, decode_precision_name(decode_precision())));
  RETNET_CHECK(released_.empty(),
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
  if (packed_)
    if (auto it = packed_->by_tensor.find(index); it != packed_->by_tensor.end()) return it->second;
  const auto it = plain_->by_tensor.find(index);
  RETNET_CHECK(
      it != plain_->by_tensor.end(),
      "tensor '{}' is not a projection's first tensor or the embedding: no product or "
      "lookup reads it as a weight",
      index < params_.layout().size() ? params_.layout()[index].name : std::to_string(index));
  if (!released_.empty() && released_[index]) throw_released(index);
  return it->second;
}

}  // namespace retnet
