#pragma once
// What a Model keeps of its weights besides its float32 parameters: the weight of every product
// and of the embedding (retnet/model/weight.h), the storage they point into, and what preparing
// them left behind (the float32 tensors released, the fingerprint taken before). weight_packer.cpp
// builds it; Model only reads it.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "retnet/core/half.h"
#include "retnet/model/model.h"
#include "retnet/model/weight.h"

namespace retnet {

struct WeightStore {
  DecodePrecision precision = DecodePrecision::F32;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<BFloat16> bf16;
  // With released weights in f16/bf16, the embedding too, row-major [vocab, d] (rows are looked
  // up, not multiplied: no panels); its by_tensor entry points here.
  std::vector<uint16_t> embed_f16;
  std::vector<BFloat16> embed_bf16;
  // The quantised precisions: every product's panels, one after another.
  std::vector<uint8_t> quant;
  bool head_f32 = false;  // a quantised model whose LM head stays float32 (in f32)
  // The weight of each product by its first tensor, and of the embedding (a tied one: the head's).
  std::unordered_map<size_t, Weight> by_tensor;
  // Weights used in place: what holds their storage (the file mappings), and their bytes.
  std::shared_ptr<const void> keep_alive;
  int64_t in_place_bytes = 0;

  // Per layout tensor, whether its float32 values are gone from the model's buffer (packed and
  // released, used in place, stored quantised); empty when none is.
  std::vector<bool> released;
  // With released tensors, model_fingerprint's value: taken while the values passed by, or (when
  // `lazy` is set) computed on first use by reading the source again.
  uint64_t fingerprint = 0;
  struct LazyFingerprint {
    std::once_flag once;
    uint64_t value = 0;
    std::function<uint64_t()> compute;
  };
  std::shared_ptr<LazyFingerprint> lazy;
};

}  // namespace retnet
