#pragma once
// Internal to src/model: builds what a model's products read (retnet/model/weight.h), from its
// float32 buffer or from a loader's tensors: packed panels in f32/f16/bf16, quantised panels, rows
// used where a mapped file holds them, and the float32 rows themselves. Model keeps the result
// (DecodePack); the packing itself lives here.
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "retnet/model/model.h"
#include "decode_pack.h"

namespace retnet {

// The products of a forward pass, as (first tensor, N, K): each layer's q|k|v|g, out, fc1|gate,
// fc2, and the LM head (adjacent tensors of one product are one matrix).
using Products = std::vector<std::tuple<size_t, int64_t, int64_t>>;

class WeightPacker {
 public:
  explicit WeightPacker(Model& model) : m_(model) {}

  static Products products(const Model& model);
  // Every product and the embedding as the float32 rows the buffer holds (Plain weights).
  static std::shared_ptr<const DecodePack> plain_weights(const Model& model);

  // Packs every product from the buffer into m_'s pack; with `release`, each product's float32
  // pages are returned as it is packed (and, in f16/bf16, the untied embedding is kept row-major
  // in that type).
  void pack(DecodePrecision precision, bool release, const QuantOptions& quant = {});
  // Model::prepare_inference from a loader: tensors filled from `source` one at a time, each
  // product packed (or used in place, where `in_place` finds its tensors) as soon as its tensors
  // are in.
  void fill_and_pack(DecodePrecision precision, const Model::TensorSource& source,
                     const Model::InPlaceSource& in_place, std::shared_ptr<const void> keep_alive);

 private:
  void pack_quantized(QuantType type, const Products& products, bool release,
                      const QuantOptions& quant, DecodePack& pack);
  // Parts of pack_quantized: room for every product's blocks (pointers into the pack stay valid),
  // and one product (first tensor, N, K) quantised, optionally releasing its float32 pages
  // (`values` as in pack_product).
  void reserve_quantized(QuantType type, const Products& products, const QuantOptions& quant,
                         DecodePack& pack) const;
  void pack_quantized_product(QuantType type, size_t index, int64_t N, int64_t K, bool release,
                              const QuantOptions& quant, DecodePack& pack,
                              const float* values = nullptr);
  // Parts of pack: one product (first tensor, N, K) at `offset` of the pack, and the f16/bf16
  // row-major embedding, each optionally releasing its float32 pages. `values`: the product's
  // float32 values when they are not in the buffer (a loader's staging area).
  void pack_product(DecodePack& pack, size_t index, int64_t N, int64_t K, size_t& offset,
                    bool release, const float* values = nullptr);
  void pack_half_embedding(DecodePack& pack, bool release);
  // The product's tensors are gone from the buffer (q|k|v|g, fc1|gate: all of them).
  void release_product(size_t index, int64_t N, int64_t K);
  // The fingerprint computed on first use by reading every tensor through `source` again;
  // `keep_alive` (what `source` reads) moves into the pack.
  void defer_fingerprint(const Model::TensorSource& source, DecodePack& pack,
                         std::shared_ptr<const void> keep_alive);

  Model& m_;
};

}  // namespace retnet
