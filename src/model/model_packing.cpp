// A model's decode weights: the projections packed into panels (f32, f16, bf16) or quantised
// blocks at load, or used row-major in place where a mapped file holds them in the decode type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/hash.h"
#include "retnet/core/mapped_file.h"
#include "retnet/core/quant.h"
#include "retnet/model/model.h"
#include "decode_pack.h"

namespace retnet {

namespace {

// The products of a decode step: q|k|v|g, out, fc1|gate, fc2, and the LM head, as
// (first tensor, N, K).
// Widths are each layer's own (a hybrid model's attention layers have theirs).
std::vector<std::tuple<size_t, int64_t, int64_t>> projection_products(
    const Config& c, const std::vector<Config>& layer_configs, const ModelTensors& t) {
  const int64_t d = c.embed_dim, F = c.ffn_dim;
  std::vector<std::tuple<size_t, int64_t, int64_t>> products;
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTensors& L = t.layers[l];
    const Config& lc = layer_configs[l];
    products.emplace_back(L.q_proj, lc.projection_width(), d);
    products.emplace_back(L.out_proj, d, lc.value_embed_dim);
    products.emplace_back(L.fc1, 2 * F, d);
    products.emplace_back(L.fc2, d, F);
  }
  products.emplace_back(t.output_projection, c.vocab_size, d);
  return products;
}

}  // namespace

void Model::prepare_decode(DecodePrecision precision) {
  require_complete_weights("preparing the weights again");
  pack_projections(precision, false);
}

namespace {

// An empty pack with room for every product (pointers into it stay valid as products are added).
std::shared_ptr<DecodePack> empty_pack(
    DecodePrecision precision, const std::vector<std::tuple<size_t, int64_t, int64_t>>& products) {
  auto pack = std::make_shared<DecodePack>();
  pack->precision = precision;
  size_t total = 0;
  for (auto [index, N, K] : products) total += packed_weight_elements(N, K);
  // Pages of the packed copy are touched only as each product is packed (prepare_inference
  // releases each original right after, so the resident set never holds both copies whole).
  if (precision == DecodePrecision::F32)
    pack->f32.reserve(total);
  else if (precision == DecodePrecision::F16)
    pack->f16.reserve(total);
  else
    pack->bf16.reserve(total);
  return pack;
}

}  // namespace

void Model::pack_product(DecodePack& pack, size_t index, int64_t N, int64_t K, size_t& offset,
                         bool release, const float* values) {
  const DecodePrecision precision = pack.precision;
  PackedProjection p;
  p.N = N;
  p.K = K;
  const float* w = values ? values : params_.tensor(index);
  const size_t n = packed_weight_elements(N, K);
  if (precision == DecodePrecision::F32) {
    pack.f32.resize(offset + n);
    pack_weights(w, N, K, K, pack.f32.data() + offset);
    p.f32 = pack.f32.data() + offset;
  } else if (precision == DecodePrecision::F16) {
    for (int64_t i = 0; i < N * K; ++i)
      RETNET_CHECK(std::fabs(w[i]) <= 65504.f,
                   "weight {} of '{}' is {}: outside the f16 range; use bf16 or f32", i,
                   params_.layout()[index].name, w[i]);
    pack.f16.resize(offset + n);
    pack_weights_f16(w, N, K, K, pack.f16.data() + offset);
    p.f16 = pack.f16.data() + offset;
  } else {
    pack.bf16.resize(offset + n);
    pack_weights_bf16(w, N, K, K, pack.bf16.data() + offset);
    p.bf16 = pack.bf16.data() + offset;
  }
  pack.by_tensor[index] = p;
  offset += n;
  if (release) {
    params_.release_pages(params_.layout()[index].offset, static_cast<size_t>(N * K));
    // The product spans adjacent tensors (q|k|v|g, fc1|gate): all of them are gone.
    const size_t end = params_.layout()[index].offset + static_cast<size_t>(N * K);
    for (size_t i = index; i < params_.layout().size() && params_.layout()[i].offset < end; ++i)
      released_[i] = true;
  }
}

void Model::pack_half_embedding(DecodePack& pack, bool release) {
  const size_t e = tensors_.embed, n = params_.layout()[e].numel;
  const float* w = params_.tensor(e);
  PackedProjection p;
  p.N = config_.vocab_size;
  p.K = config_.embed_dim;
  if (pack.precision == DecodePrecision::F16) {
    for (size_t i = 0; i < n; ++i)
      RETNET_CHECK(std::fabs(w[i]) <= 65504.f,
                   "weight {} of '{}' is {}: outside the f16 range; use bf16 or f32", i,
                   params_.layout()[e].name, w[i]);
    pack.embed_f16.resize(n);
    for (size_t i = 0; i < n; ++i) pack.embed_f16[i] = float_to_half(w[i]);
    p.f16 = pack.embed_f16.data();
  } else {
    pack.embed_bf16.resize(n);
    for (size_t i = 0; i < n; ++i) pack.embed_bf16[i] = BFloat16{float_to_bf16(w[i])};
    p.bf16 = pack.embed_bf16.data();
  }
  pack.by_tensor[e] = p;
  if (release) {
    params_.release_pages(params_.layout()[e].offset, n);
    released_[e] = true;
  }
}

void Model::pack_projections(DecodePrecision precision, bool release, const QuantOptions& quant) {
  const auto products = projection_products(config_, layer_configs_, tensors_);
  if (const auto type = decode_quant_type(precision)) {
    auto pack = std::make_shared<DecodePack>();
    pack->precision = precision;
    pack_quantized(*type, products, release, quant, *pack);
    packed_ = std::move(pack);
    return;
  }
  auto pack = empty_pack(precision, products);
  size_t offset = 0;
  for (auto [index, N, K] : products) pack_product(*pack, index, N, K, offset, release);
  // A tied embedding is looked up in the LM head's panels (its by_tensor entry is the head's);
  // an untied one, with released weights in f16/bf16, gets a row-major copy in that type.
  const bool tied = tensors_.embed == tensors_.output_projection;
  if (release && precision != DecodePrecision::F32 && !tied) pack_half_embedding(*pack, true);
  packed_ = std::move(pack);
}

void Model::prepare_inference(DecodePrecision precision, const TensorSource& source) {
  fill_and_pack(precision, source, nullptr, nullptr);
}

void Model::prepare_inference(DecodePrecision precision, const TensorSource& source,
                              const InPlaceSource& in_place,
                              std::shared_ptr<const void> keep_alive) {
  fill_and_pack(precision, source, in_place, std::move(keep_alive));
}

namespace {

// The element size of a precision's row-major weights (f32, f16, bf16).
size_t element_bytes(DecodePrecision precision) {
  return precision == DecodePrecision::F32 ? sizeof(float) : sizeof(uint16_t);
}

RowMajorSlice row_major_slice(DecodePrecision precision, int64_t first_row, int64_t rows,
                              const void* data, const std::string& tensor) {
  RowMajorSlice s{
      first_row, rows, nullptr, nullptr, nullptr, tensor, std::make_shared<std::once_flag>()};
  if (precision == DecodePrecision::F32)
    s.f32 = static_cast<const float*>(data);
  else if (precision == DecodePrecision::F16)
    s.f16 = static_cast<const uint16_t*>(data);
  else
    s.bf16 = static_cast<const BFloat16*>(data);
  return s;
}

// Where a loader writes the tensors of the products it packs: one staging area, reused product
// after product, instead of the buffer's own pages. A fresh page costs a fault and a clear in the
// kernel, a large share of a converting load (docs/design-notes.md#staging-area-for-loads); the
// staging area's pages are cleared once.
class Staging {
 public:
  // The products (first tensor, N, K) for which `staged(first)` holds.
  template <typename Staged>
  Staging(const ParamLayout& layout,
          const std::vector<std::tuple<size_t, int64_t, int64_t>>& products, Staged staged)
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

void Model::fill_and_pack(DecodePrecision precision, const TensorSource& source,
                          const InPlaceSource& in_place, std::shared_ptr<const void> keep_alive) {
  require_complete_weights("preparing the weights again");
  RETNET_CHECK(params_.sole_holder() && params_.owns_memory(),
               "loading weights into a model while preparing it needs a buffer of its own");
  const auto products = projection_products(config_, layer_configs_, tensors_);
  const ParamLayout& layout = params_.layout();
  // Each product is packed once its last tensor is filled (its tensors are adjacent).
  std::unordered_map<size_t, std::tuple<size_t, int64_t, int64_t>> ending_at;
  for (const auto& product : products) {
    const auto [index, N, K] = product;
    size_t last = index;
    const size_t end = layout[index].offset + static_cast<size_t>(N * K);
    while (last + 1 < layout.size() && layout[last + 1].offset < end) ++last;
    ending_at[last] = product;
  }
  released_.assign(layout.size(), false);
  const bool tied = tensors_.embed == tensors_.output_projection;
  if (const auto type = decode_quant_type(precision)) {
    // Each product is quantised as soon as its tensors are in, and its float32 pages released:
    // the resident set peaks at the blocks plus one product in float32.
    auto pack = std::make_shared<DecodePack>();
    pack->precision = precision;
    reserve_quantized(*type, products, {}, *pack);
    const Staging staging(layout, products, [](size_t) { return true; });
    const std::string config = config_.to_json();
    uint64_t hash = fnv1a(config.data(), config.size());  // as model_fingerprint
    try {
      for (size_t i = 0; i < layout.size(); ++i) {
        float* w = staging.place(i, params_.tensor(i));
        source(i, w);
        if (!keep_alive) hash = fnv1a(w, layout[i].numel * sizeof(float), hash);
        if (auto it = ending_at.find(i); it != ending_at.end()) {
          const auto [index, N, K] = it->second;
          pack_quantized_product(*type, index, N, K, true, {}, *pack, staging.product(index));
        }
      }
    } catch (...) {  // a width not a multiple of 32, a non-finite weight: the model is unusable
      released_.clear();
      throw;
    }
    if (keep_alive)
      defer_fingerprint(source, *pack, std::move(keep_alive));
    else
      fingerprint_ = hash;
    packed_ = std::move(pack);
    return;
  }
  // The products (and the embedding) whose every tensor is stored in the precision's type are
  // used where they lie: their tensors are never read here.
  auto pack = std::make_shared<DecodePack>();
  std::vector<bool> viewed(layout.size(), false);
  auto stored_at = [&](size_t i) -> const void* {
    const void* p = in_place ? in_place(i) : nullptr;
    return p && reinterpret_cast<uintptr_t>(p) % element_bytes(precision) == 0 ? p : nullptr;
  };
  auto use_in_place = [&](size_t first, size_t last, int64_t N, int64_t K) {
    PackedProjection p;
    p.N = N;
    p.K = K;
    if (last - first + 1 > static_cast<size_t>(kMaxRowMajorParts)) return;
    for (size_t i = first; i <= last; ++i) {
      const void* data = stored_at(i);
      if (!data) return;
      const int64_t rows = static_cast<int64_t>(layout[i].numel) / K;
      p.in_place.push_back(row_major_slice(
          precision, p.in_place.empty() ? 0 : p.in_place.back().first_row + p.in_place.back().rows,
          rows, data,
          tensor_origins_.size() > i
              ? fmt::format("'{}' ({})", layout[i].name, tensor_origins_[i])
              : fmt::format("'{}'", layout[i].name)));
    }
    for (size_t i = first; i <= last; ++i) viewed[i] = true;
    pack->in_place_bytes += N * K * static_cast<int64_t>(element_bytes(precision));
    pack->by_tensor[first] = std::move(p);
  };
  if (in_place) {
    for (const auto& [last, product] : ending_at) {
      const auto [index, N, K] = product;
      use_in_place(index, last, N, K);
    }
    if (!tied) use_in_place(tensors_.embed, tensors_.embed, config_.vocab_size, config_.embed_dim);
  }
  {  // room for the products still to pack (only those: the reservation's pointers stay valid)
    std::vector<std::tuple<size_t, int64_t, int64_t>> to_pack;
    for (const auto& product : products)
      if (!viewed[std::get<0>(product)]) to_pack.push_back(product);
    auto room = empty_pack(precision, to_pack);
    room->by_tensor = std::move(pack->by_tensor);
    room->in_place_bytes = pack->in_place_bytes;
    pack = std::move(room);
  }
  // Hashing every weight costs about a second per GB (byte by byte): when `source` can read
  // them again (it owns what it reads), the hash waits for the first state file.
  const bool any_viewed = std::find(viewed.begin(), viewed.end(), true) != viewed.end();
  const bool defer = any_viewed || keep_alive;
  const Staging staging(layout, products, [&](size_t first) { return !viewed[first]; });
  const std::string config = config_.to_json();
  uint64_t hash = fnv1a(config.data(), config.size());  // as model_fingerprint, tensor by tensor
  size_t offset = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (viewed[i]) {  // no float32 values in the buffer: like released ones
      released_[i] = true;
      continue;
    }
    float* w = staging.place(i, params_.tensor(i));
    source(i, w);
    if (!defer) hash = fnv1a(w, layout[i].numel * sizeof(float), hash);
    if (auto it = ending_at.find(i); it != ending_at.end()) {
      const auto [index, N, K] = it->second;
      pack_product(*pack, index, N, K, offset, true, staging.product(index));
    }
    if (i == tensors_.embed && !tied && precision != DecodePrecision::F32)
      pack_half_embedding(*pack, true);
  }
  if (defer)
    defer_fingerprint(source, *pack, std::move(keep_alive));
  else
    fingerprint_ = hash;
  packed_ = std::move(pack);
}

void Model::defer_fingerprint(const TensorSource& source, DecodePack& pack,
                              std::shared_ptr<const void> keep_alive) {
  pack.keep_alive = std::move(keep_alive);
  lazy_fingerprint_ = std::make_shared<LazyFingerprint>();
  lazy_fingerprint_->compute = [source, layout = params_.layout(), config = config_.to_json()] {
    uint64_t h = fnv1a(config.data(), config.size());
    std::vector<float> values;
    for (size_t i = 0; i < layout.size(); ++i) {
      values.resize(layout[i].numel);
      source(i, values.data());
      h = fnv1a(values.data(), values.size() * sizeof(float), h);
    }
    return h;
  };
}

int64_t Model::in_place_bytes() const { return packed_ ? packed_->in_place_bytes : 0; }

// Quantises each product (or takes its stored blocks), releasing the float32 originals as it goes
// like the other precisions. The LM head may stay float32, packed in panels.
void Model::pack_quantized(QuantType type,
                           const std::vector<std::tuple<size_t, int64_t, int64_t>>& products,
                           bool release, const QuantOptions& quant, DecodePack& pack) {
  reserve_quantized(type, products, quant, pack);
  for (auto [index, N, K] : products)
    pack_quantized_product(type, index, N, K, release, quant, pack);
}

void Model::reserve_quantized(QuantType type,
                              const std::vector<std::tuple<size_t, int64_t, int64_t>>& products,
                              const QuantOptions& quant, DecodePack& pack) const {
  const ParamLayout& layout = params_.layout();
  size_t quant_bytes = 0, f32_elements = 0;
  for (auto [index, N, K] : products) {
    if (quant.keep_head_f32 && index == tensors_.output_projection)
      f32_elements += packed_weight_elements(N, K);
    else if (quant_row_bytes(type, K, layout[index].name) > 0)  // an Error naming the tensor if not
      quant_bytes += quant_panel_bytes(type, N, K);
  }
  pack.quant.reserve(quant_bytes);  // no reallocation later: the pointers taken stay valid
  pack.f32.reserve(f32_elements);
  pack.head_f32 = quant.keep_head_f32;
}

void Model::pack_quantized_product(QuantType type, size_t index, int64_t N, int64_t K, bool release,
                                   const QuantOptions& quant, DecodePack& pack,
                                   const float* values) {
  const ParamLayout& layout = params_.layout();
  const float* w = values ? values : params_.tensor(index);
  PackedProjection p;
  p.N = N;
  p.K = K;
  if (quant.keep_head_f32 && index == tensors_.output_projection) {
    const size_t offset = pack.f32.size();
    pack.f32.resize(offset + packed_weight_elements(N, K));
    pack_weights(w, N, K, K, pack.f32.data() + offset);
    p.f32 = pack.f32.data() + offset;
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
      if (!quant.stored) {
        quantize_rows(type, w + r0 * K, n, K, K, out, layout[index].name);
        return;
      }
      // The product's tensors (q|k|v|g, fc1|gate), each stored on its own: the parts of those
      // that overlap rows [r0, r0 + n).
      for (int64_t row = 0, i = static_cast<int64_t>(index); row < r0 + n; ++i) {
        const auto it = quant.stored->find(static_cast<size_t>(i));
        RETNET_CHECK(it != quant.stored->end(), "tensor '{}' is not stored quantised",
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
    if (quant.stored && quant.stored_mapped)
      for (size_t i = index; i < layout.size() &&
                             layout[i].offset < layout[index].offset + static_cast<size_t>(N * K);
           ++i)
        if (const auto it = quant.stored->find(i); it != quant.stored->end())
          release_mapped(it->second.data, it->second.size);
    p.quant = pack.quant.data() + offset;
    p.quant_type = type;
  }
  pack.by_tensor[index] = p;
  if (release) {
    params_.release_pages(layout[index].offset, static_cast<size_t>(N * K));
    const size_t end = layout[index].offset + static_cast<size_t>(N * K);
    for (size_t i = index; i < layout.size() && layout[i].offset < end; ++i) released_[i] = true;
  }
}

std::vector<std::pair<size_t, int64_t>> Model::projection_tensors() const {
  const ParamLayout& layout = params_.layout();
  std::vector<std::pair<size_t, int64_t>> out;
  for (auto [index, N, K] : projection_products(config_, layer_configs_, tensors_)) {
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
    pack_projections(precision, false, quant);
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
    pack_projections(precision, true, quant);  // reads the originals through params_, not param()
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

const PackedProjection* Model::packed(size_t index) const {
  if (!packed_) return nullptr;
  auto it = packed_->by_tensor.find(index);
  return it == packed_->by_tensor.end() ? nullptr : &it->second;
}

}  // namespace retnet
