// Builds a model's weights (weight_packer.h) in one pass from any source: the products packed into
// panels (f32, f16, bf16) or quantised blocks at load, copied from stored blocks, used row-major in
// place where a mapped file holds them in the decode type, or read as the float32 rows of the
// buffer.
#include "weight_packer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/hash.h"
#include "retnet/core/mapped_file.h"
#include "retnet/core/quant.h"

namespace retnet {

namespace {

Weight panels(ElementType type, int64_t N, int64_t K, const void* data, const std::string& name) {
  Weight w;
  w.type = type;
  w.placement = Placement::Panels;
  w.N = N;
  w.K = K;
  w.data = data;
  w.name = name;
  return w;
}

}  // namespace

Products WeightPacker::products(const Model& model) {
  const Config& c = model.config_;
  const ModelTensors& t = model.tensors_;
  const int64_t d = c.embed_dim, F = c.ffn_dim;
  Products products;
  // Widths are each layer's own (a hybrid model's attention layers have theirs).
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTensors& L = t.layers[l];
    const Config& lc = model.layer_configs_[l];
    products.emplace_back(L.q_proj, lc.projection_width(), d);
    products.emplace_back(L.out_proj, d, lc.value_embed_dim);
    products.emplace_back(L.fc1, 2 * F, d);
    products.emplace_back(L.fc2, d, F);
  }
  products.emplace_back(t.output_projection, c.vocab_size, d);
  return products;
}

std::shared_ptr<const WeightStore> WeightPacker::plain_weights(const Model& model) {
  auto pack = std::make_shared<WeightStore>();
  pack->precision = DecodePrecision::F32;
  const ParamLayout& layout = model.params_.layout();
  auto add = [&](size_t index, int64_t N, int64_t K) {
    Weight w;
    w.N = N;
    w.K = K;
    w.data = model.params_.tensor(index);
    w.name = layout[index].name;
    pack->by_tensor[index] = std::move(w);
  };
  for (auto [index, N, K] : products(model)) add(index, N, K);
  add(model.tensors_.embed, model.config_.vocab_size, model.config_.embed_dim);
  return pack;
}

namespace {

// Room in `store` for every product's panels (pointers into it stay valid as products are added).
void reserve_panels(DecodePrecision precision, const Products& products, WeightStore& store) {
  size_t total = 0;
  for (auto [index, N, K] : products) total += packed_weight_elements(N, K);
  // Pages of the packed copy are touched only as each product is packed (prepare_inference
  // releases each original right after, so the resident set never holds both copies whole).
  if (precision == DecodePrecision::F32)
    store.f32.reserve(total);
  else if (precision == DecodePrecision::F16)
    store.f16.reserve(total);
  else
    store.bf16.reserve(total);
}

}  // namespace

void WeightPacker::pack_product(WeightStore& pack, size_t index, int64_t N, int64_t K,
                                size_t& offset, bool release, const float* values) {
  const DecodePrecision precision = pack.precision;
  const std::string& name = m_.params_.layout()[index].name;
  const float* w = values ? values : m_.params_.tensor(index);
  const size_t n = packed_weight_elements(N, K);
  Weight p;
  if (precision == DecodePrecision::F32) {
    pack.f32.resize(offset + n);
    pack_weights(w, N, K, K, pack.f32.data() + offset);
    p = panels(ElementType::F32, N, K, pack.f32.data() + offset, name);
    // The buffer keeps the rows the panels came from: many-row products read them there.
    if (!release) p.rows_f32 = m_.params_.tensor(index);
  } else if (precision == DecodePrecision::F16) {
    for (int64_t i = 0; i < N * K; ++i)
      RETNET_CHECK(std::fabs(w[i]) <= 65504.f,
                   "weight {} of '{}' is {}: outside the f16 range; use bf16 or f32", i, name,
                   w[i]);
    pack.f16.resize(offset + n);
    pack_weights_f16(w, N, K, K, pack.f16.data() + offset);
    p = panels(ElementType::F16, N, K, pack.f16.data() + offset, name);
  } else {
    pack.bf16.resize(offset + n);
    pack_weights_bf16(w, N, K, K, pack.bf16.data() + offset);
    p = panels(ElementType::BF16, N, K, pack.bf16.data() + offset, name);
  }
  pack.by_tensor[index] = std::move(p);
  offset += n;
  if (release) release_product(pack, index, N, K);
}

void WeightPacker::release_product(WeightStore& store, size_t index, int64_t N, int64_t K) {
  const ParamLayout& layout = m_.params_.layout();
  m_.params_.release_pages(layout[index].offset, static_cast<size_t>(N * K));
  // The product spans adjacent tensors (q|k|v|g, fc1|gate): all of them are gone.
  const size_t end = layout[index].offset + static_cast<size_t>(N * K);
  for (size_t i = index; i < layout.size() && layout[i].offset < end; ++i) store.released[i] = true;
}

void WeightPacker::pack_half_embedding(WeightStore& pack, bool release) {
  const size_t e = m_.tensors_.embed, n = m_.params_.layout()[e].numel;
  const float* w = m_.params_.tensor(e);
  // Row-major: rows are looked up, not multiplied.
  Weight p;
  p.N = m_.config_.vocab_size;
  p.K = m_.config_.embed_dim;
  p.name = m_.params_.layout()[e].name;
  if (pack.precision == DecodePrecision::F16) {
    for (size_t i = 0; i < n; ++i)
      RETNET_CHECK(std::fabs(w[i]) <= 65504.f,
                   "weight {} of '{}' is {}: outside the f16 range; use bf16 or f32", i,
                   m_.params_.layout()[e].name, w[i]);
    pack.embed_f16.resize(n);
    for (size_t i = 0; i < n; ++i) pack.embed_f16[i] = float_to_half(w[i]);
    p.type = ElementType::F16;
    p.data = pack.embed_f16.data();
  } else {
    pack.embed_bf16.resize(n);
    for (size_t i = 0; i < n; ++i) pack.embed_bf16[i] = BFloat16{float_to_bf16(w[i])};
    p.type = ElementType::BF16;
    p.data = pack.embed_bf16.data();
  }
  pack.by_tensor[e] = std::move(p);
  if (release) {
    m_.params_.release_pages(m_.params_.layout()[e].offset, n);
    pack.released[e] = true;
  }
}

namespace {

// Where a loader writes the tensors of the products it packs: one staging area, reused product
// after product, instead of the buffer's own pages. A fresh page costs a fault and a clear in the
// kernel, a large share of a converting load (docs/design-notes.md#staging-area-for-loads); the
// staging area's pages are cleared once.
class Staging {
 public:
  // The products (first tensor, N, K) for which `staged(first)` holds.
  template <typename Staged>
  Staging(const ParamLayout& layout, const Products& products, Staged staged)
      : offset_(layout.size(), kNone) {
    size_t floats = 0;
    for (const auto& [first, N, K] : products) {
      if (!staged(first)) continue;
      const size_t n = static_cast<size_t>(N * K), end = layout[first].offset + n;
      for (size_t i = first; i < layout.size() && layout[i].offset < end; ++i)
        offset_[i] = layout[i].offset - layout[first].offset;
      floats = std::max(floats, n);
    }
    if (floats) area_.reset(new float[floats]);  // not value-initialised: untouched until filled
  }
  // Where tensor i goes: in the staging area, or `otherwise` (its place in the buffer).
  float* place(size_t i, float* otherwise) const {
    return offset_[i] == kNone ? otherwise : area_.get() + offset_[i];
  }
  // The values of the product whose first tensor is `first`, nullptr if it is not staged.
  const float* product(size_t first) const {
    return offset_[first] == kNone ? nullptr : area_.get();
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> offset_;
  std::unique_ptr<float[]> area_;
};

}  // namespace

void WeightPacker::prepare(const LoadPlan& plan) {
  m_.require_complete_weights("preparing the weights again");
  const DecodePrecision precision = plan.precision;
  const WeightSource& source = plan.source;
  const std::optional<QuantType> quant = decode_quant_type(precision);
  RETNET_CHECK(source.quantised.empty() || quant,
               "stored quantised tensors need a quantised precision, not {}",
               decode_precision_name(precision));
  const bool from_buffer = !source.read;
  RETNET_CHECK(!plan.keep_float32 || (from_buffer && source.quantised.empty()),
               "keeping the float32 weights beside the prepared ones needs them in the buffer, "
               "not in a loader's source");
  RETNET_CHECK(source.quantised.empty() || !source.keep_alive,
               "stored quantised tensors are copied at load: their storage is not kept");
  if (!from_buffer)
    RETNET_CHECK(m_.params_.sole_holder() && m_.params_.owns_memory(),
                 "loading weights into a model while preparing it needs a buffer of its own");
  // A copy sharing the buffer's storage would lose its weights with ours: nothing is released
  // then (stored quantised tensors have no float32 values to keep).
  const bool release = !plan.keep_float32 &&
                       (!from_buffer || m_.params_.sole_holder() || !source.quantised.empty());
  // The source's storage stays mapped for the model's life: tensors stored in the precision's
  // type are used where they lie, and the fingerprint reads them again on first use.
  const bool keep_mapped = release && plan.in_place && source.keep_alive != nullptr;

  const Products all = products(m_);
  const ParamLayout& layout = m_.params_.layout();
  const bool tied = m_.tensors_.embed == m_.tensors_.output_projection;
  // Each product is built once its last tensor is in (its tensors are adjacent).
  std::unordered_map<size_t, std::tuple<size_t, int64_t, int64_t>> ending_at;
  for (const auto& product : all) {
    const auto [index, N, K] = product;
    size_t last = index;
    const size_t end = layout[index].offset + static_cast<size_t>(N * K);
    while (last + 1 < layout.size() && layout[last + 1].offset < end) ++last;
    ending_at[last] = product;
  }
  auto store = std::make_shared<WeightStore>();
  store->precision = precision;
  if (release) store->released.assign(layout.size(), false);

  // The products (and the embedding) whose every tensor is stored in the precision's type are
  // used where they lie: their tensors are never read here.
  std::vector<bool> viewed(layout.size(), false);
  if (keep_mapped && source.stored_as && !quant) {
    const ElementType type = decode_element_type(precision);
    auto stored_at = [&](size_t i) -> const void* {
      const void* p = source.stored_as(i, type);
      return p && reinterpret_cast<uintptr_t>(p) % element_bytes(type) == 0 ? p : nullptr;
    };
    auto use_in_place = [&](size_t first, size_t last, int64_t N, int64_t K) {
      Weight p;
      p.type = type;
      p.placement = Placement::InPlace;
      p.N = N;
      p.K = K;
      p.name = layout[first].name;
      if (last - first + 1 > static_cast<size_t>(kMaxRowMajorParts)) return;
      for (size_t i = first; i <= last; ++i) {
        const void* data = stored_at(i);
        if (!data) return;
        const int64_t rows = static_cast<int64_t>(layout[i].numel) / K;
        const int64_t first_row =
            p.parts.empty() ? 0 : p.parts.back().first_row + p.parts.back().rows;
        p.parts.push_back({first_row, rows, data,
                           source.origins.size() > i
                               ? fmt::format("'{}' ({})", layout[i].name, source.origins[i])
                               : fmt::format("'{}'", layout[i].name),
                           std::make_shared<std::once_flag>()});
      }
      for (size_t i = first; i <= last; ++i) viewed[i] = true;
      store->in_place_bytes += N * K * static_cast<int64_t>(element_bytes(type));
      store->by_tensor[first] = std::move(p);
    };
    for (const auto& [last, product] : ending_at) {
      const auto [index, N, K] = product;
      use_in_place(index, last, N, K);
    }
    if (!tied)
      use_in_place(m_.tensors_.embed, m_.tensors_.embed, m_.config_.vocab_size,
                   m_.config_.embed_dim);
  }
  // Room for the products still to build (only those: the reserved pointers stay valid).
  if (quant) {
    reserve_quantized(*quant, all, plan.keep_head_f32, *store);
  } else {
    Products to_pack;
    for (const auto& product : all)
      if (!viewed[std::get<0>(product)]) to_pack.push_back(product);
    reserve_panels(precision, to_pack, *store);
  }

  // Hashing every weight costs about a second per GB (byte by byte): when the source stays
  // mapped (its `read` can read them again), the hash waits for the first state file.
  const bool defer = keep_mapped;
  const bool hash_now = release && !defer;
  const std::string config = m_.config_.to_json();
  uint64_t hash = fnv1a(config.data(), config.size());  // as model_fingerprint, tensor by tensor
  // A loader's tensors go to one staging area per product, reused (weight_packer.cpp's Staging).
  const Staging staging(layout, all, [&](size_t first) {
    return !from_buffer && !viewed[first] && !source.quantised.count(first);
  });
  size_t offset = 0;
  try {
    for (size_t i = 0; i < layout.size(); ++i) {
      if (viewed[i]) {  // no float32 values in the buffer: like released ones
        store->released[i] = true;
        continue;
      }
      if (!source.quantised.count(i)) {
        float* w = from_buffer ? m_.params_.tensor(i) : staging.place(i, m_.params_.tensor(i));
        if (!from_buffer) source.read(i, w, true);
        if (hash_now) hash = fnv1a(w, layout[i].numel * sizeof(float), hash);
      }
      if (auto it = ending_at.find(i); it != ending_at.end()) {
        const auto [index, N, K] = it->second;
        const float* values = from_buffer ? nullptr : staging.product(index);
        if (quant)
          pack_quantized_product(*quant, index, N, K, release, plan.keep_head_f32, source,
                                 *store, values);
        else
          pack_product(*store, index, N, K, offset, release, values);
      }
      // Released weights in f16/bf16: an untied embedding gets a row-major copy in that type (a
      // tied one is looked up in the LM head's panels: its by_tensor entry is the head's).
      if (i == m_.tensors_.embed && !tied && release &&
          (precision == DecodePrecision::F16 || precision == DecodePrecision::BF16))
        pack_half_embedding(*store, true);
    }
  } catch (...) {
    // Refused before anything was released (a width not a multiple of 32): the model is as it
    // was. Otherwise what is gone is recorded, so that using it is an Error, not zeros.
    if (release && std::find(store->released.begin(), store->released.end(), true) !=
                       store->released.end()) {
      auto gone = std::make_shared<WeightStore>();
      gone->precision = precision;
      gone->released = std::move(store->released);
      m_.prepared_ = std::move(gone);
    }
    throw;
  }
  // Stored blocks are identified by their bytes (their float32 values were never in the buffer),
  // after the other tensors.
  for (const auto& [index, bytes] : source.quantised) {
    if (hash_now) hash = fnv1a(bytes.data, bytes.size, hash ^ index);
    if (source.release_quantised) release_mapped(bytes.data, bytes.size);
  }
  if (defer)
    defer_fingerprint(source, viewed, *store);
  else if (release)
    store->fingerprint = hash;
  m_.prepared_ = std::move(store);
}

void WeightPacker::defer_fingerprint(const WeightSource& source, std::vector<bool> in_place,
                                     WeightStore& store) {
  store.keep_alive = source.keep_alive;
  store.lazy = std::make_shared<WeightStore::LazyFingerprint>();
  store.lazy->compute = [read = source.read, in_place = std::move(in_place),
                         layout = m_.params_.layout(), config = m_.config_.to_json()] {
    uint64_t h = fnv1a(config.data(), config.size());
    std::vector<float> values;
    for (size_t i = 0; i < layout.size(); ++i) {
      values.resize(layout[i].numel);
      read(i, values.data(), !in_place[i]);
      h = fnv1a(values.data(), values.size() * sizeof(float), h);
    }
    return h;
  };
}

void WeightPacker::reserve_quantized(QuantType type, const Products& products,
                                     bool keep_head_f32, WeightStore& pack) const {
  const ParamLayout& layout = m_.params_.layout();
  size_t quant_bytes = 0, f32_elements = 0;
  for (auto [index, N, K] : products) {
    if (keep_head_f32 && index == m_.tensors_.output_projection)
      f32_elements += packed_weight_elements(N, K);
    else if (quant_row_bytes(type, K, layout[index].name) > 0)  // an Error naming the tensor if not
      quant_bytes += quant_panel_bytes(type, N, K);
  }
  pack.quant.reserve(quant_bytes);  // no reallocation later: the pointers taken stay valid
  pack.f32.reserve(f32_elements);
  pack.head_f32 = keep_head_f32;
}

void WeightPacker::pack_quantized_product(QuantType type, size_t index, int64_t N, int64_t K,
                                          bool release, bool keep_head_f32,
                                          const WeightSource& source, WeightStore& pack,
                                          const float* values) {
  const ParamLayout& layout = m_.params_.layout();
  const float* w = values ? values : m_.params_.tensor(index);
  Weight p;
  if (keep_head_f32 && index == m_.tensors_.output_projection) {
    const size_t offset = pack.f32.size();
    pack.f32.resize(offset + packed_weight_elements(N, K));
    pack_weights(w, N, K, K, pack.f32.data() + offset);
    p = panels(ElementType::F32, N, K, pack.f32.data() + offset, layout[index].name);
    // The buffer keeps the rows the panels came from: many-row products read them there.
    if (!release) p.rows_f32 = m_.params_.tensor(index);
  } else {
    const size_t row_bytes = quant_row_bytes(type, K, layout[index].name);
    const size_t offset = pack.quant.size();
    pack.quant.resize(offset + quant_panel_bytes(type, N, K));
    // The ggml rows (stored, or quantised now) of a slab of whole panel groups at a time, then
    // repacked into the decode panels: the memory in passing is one slab, not the product (a
    // product's groups take exactly its rows' bytes, so slab r0 starts at r0 rows' bytes).
    constexpr int64_t kSlabRows = 32 * kQuantPanelRows;
    std::vector<uint8_t> slab(static_cast<size_t>(std::min(N, kSlabRows)) * row_bytes);
    auto fill_rows = [&](int64_t r0, int64_t n, uint8_t* out) {
      if (source.quantised.empty()) {
        quantize_rows(type, w + r0 * K, n, K, K, out, layout[index].name);
        return;
      }
      // The product's tensors (q|k|v|g, fc1|gate), each stored on its own: the parts of those
      // that overlap rows [r0, r0 + n).
      for (int64_t row = 0, i = static_cast<int64_t>(index); row < r0 + n; ++i) {
        const auto it = source.quantised.find(static_cast<size_t>(i));
        RETNET_CHECK(it != source.quantised.end(), "tensor '{}' is not stored quantised",
                     layout[static_cast<size_t>(i)].name);
        const int64_t rows = static_cast<int64_t>(layout[static_cast<size_t>(i)].numel) / K;
        RETNET_CHECK(it->second.size == static_cast<size_t>(rows) * row_bytes,
                     "tensor '{}': {} bytes stored, but {} rows of {} values in {} take {}",
                     layout[static_cast<size_t>(i)].name, it->second.size, rows, K,
                     quant_type_name(type), static_cast<size_t>(rows) * row_bytes);
        const int64_t first = std::max(row, r0), last = std::min(row + rows, r0 + n);
        if (first < last)
          std::memcpy(out + static_cast<size_t>(first - r0) * row_bytes,
                      it->second.data + static_cast<size_t>(first - row) * row_bytes,
                      static_cast<size_t>(last - first) * row_bytes);
        row += rows;
      }
    };
    for (int64_t r0 = 0; r0 < N; r0 += kSlabRows) {
      const int64_t n = std::min(kSlabRows, N - r0);
      fill_rows(r0, n, slab.data());
      pack_quant_panels(type, slab.data(), n, K,
                        pack.quant.data() + offset + static_cast<size_t>(r0) * row_bytes);
    }
    if (source.release_quantised)
      for (size_t i = index; i < layout.size() &&
                             layout[i].offset < layout[index].offset + static_cast<size_t>(N * K);
           ++i)
        if (const auto it = source.quantised.find(i); it != source.quantised.end())
          release_mapped(it->second.data, it->second.size);
    p = panels(element_type_of(type), N, K, pack.quant.data() + offset, layout[index].name);
  }
  pack.by_tensor[index] = std::move(p);
  if (release) release_product(pack, index, N, K);
}

}  // namespace retnet
