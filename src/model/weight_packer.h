#pragma once
// Internal to src/model: builds what a model's products read (retnet/model/weight.h) in one pass
// over its layout, from its float32 buffer or from a loader's source (WeightSource): packed panels
// in f32/f16/bf16, quantised panels (quantised at load or copied from stored blocks), rows used
// where a mapped file holds them, and the float32 rows themselves. Model keeps the result
// (WeightStore); the packing itself lives here.
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "retnet/model/model.h"
#include "weight_store.h"

namespace retnet {

// The products of a forward pass, as (first tensor, N, K): each layer's q|k|v|g, out, fc1|gate,
// fc2, and the LM head (adjacent tensors of one product are one matrix).
using Products = std::vector<std::tuple<size_t, int64_t, int64_t>>;

class WeightPacker {
 public:
  explicit WeightPacker(Model& model) : m_(model) {}

  static Products products(const Model& model);
  // Every product and the embedding as the float32 rows the buffer holds (Plain weights).
  static std::shared_ptr<const WeightStore> plain_weights(const Model& model);

  // Model::prepare_inference: tensors taken from the plan's source (or the buffer) one at a time
  // in layout order, each product built (packed, quantised, copied from stored blocks, or used in
  // place) as soon as its tensors are in, its float32 pages released unless plan.keep_float32.
  void prepare(const LoadPlan& plan);

 private:
  // Room for every product's blocks (pointers into the store stay valid).
  void reserve_quantized(QuantType type, const Products& products, bool keep_head_f32,
                         WeightStore& store) const;
  // One product (first tensor, N, K) quantised, or copied from the source's stored blocks, or
  // (the LM head with keep_head_f32) packed in f32; optionally releasing its float32 pages.
  // `values`: the product's float32 values when they are not in the buffer (a staging area).
  void pack_quantized_product(QuantType type, size_t index, int64_t N, int64_t K, bool release,
                              bool keep_head_f32, const WeightSource& source, WeightStore& store,
                              const float* values);
  // One product (first tensor, N, K) at `offset` of the store's f32/f16/bf16 panels, and the
  // f16/bf16 row-major embedding, each optionally releasing its float32 pages.
  void pack_product(WeightStore& store, size_t index, int64_t N, int64_t K, size_t& offset,
                    bool release, const float* values);
  void pack_half_embedding(WeightStore& store, bool release);
  // The product's tensors are gone from the buffer (q|k|v|g, fc1|gate: all of them).
  void release_product(WeightStore& store, size_t index, int64_t N, int64_t K);
  // The fingerprint computed on first use by reading every tensor through `read` again
  // (`in_place`: the tensors whose stored pages are the weights, kept).
  void defer_fingerprint(const WeightSource& source, std::vector<bool> in_place,
                         WeightStore& store);

  Model& m_;
};

}  // namespace retnet
