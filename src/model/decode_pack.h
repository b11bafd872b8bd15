#pragma once
// The weights Model keeps besides its float32 parameters, and the storage they point into
// (weight_packer.cpp fills these).
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

struct DecodePack {
  DecodePrecision precision;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<BFloat16> bf16;
  // With released weights in f16/bf16, the embedding too, row-major [vocab, d] (rows are looked
  // up, not multiplied: no panels); its by_tensor entry points here.
  std::vector<uint16_t> embed_f16;
  std::vector<BFloat16> embed_bf16;
  std::vector<uint8_t>
      quant;              // the quantised precisions: every product's panels, one after another
  bool head_f32 = false;  // a quantised model whose LM head stays float32 (in f32)
  // The weight of each product by its first tensor, and of the embedding (a tied one: the head's).
  std::unordered_map<size_t, Weight> by_tensor;
  // Weights used in place: what holds their storage (the file mappings), and their bytes.
  std::shared_ptr<const void> keep_alive;
  int64_t in_place_bytes = 0;
};

struct Model::LazyFingerprint {
  std::once_flag once;
  uint64_t value = 0;
  std::function<uint64_t()> compute;
};

}  // namespace retnet
