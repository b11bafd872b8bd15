// Writing and reading model files whose projections are stored quantised (retnet/model/quant_io.h).
#include "retnet/model/quant_io.h"

#include <cmath>
#include <set>

#include "retnet/core/error.h"
#include "retnet/core/mapped_file.h"
#include "retnet/core/quant.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/model_io.h"

namespace retnet {

void save_quantized_model(const Model& model, const std::string& path, QuantType type,
                          bool keep_head_f32,
                          const std::map<std::string, std::string>& extra_metadata) {
  model.require_complete_weights("quantising the model");
  const ParamLayout& layout = model.params().layout();
  std::map<size_t, int64_t> quantise;  // tensor index -> K
  for (auto [index, K] : model.projection_tensors())
    if (!(keep_head_f32 && index == model.tensors().output_projection)) quantise[index] = K;
  std::map<std::string, std::string> metadata = extra_metadata;
  std::vector<std::vector<uint8_t>> blocks;
  blocks.reserve(quantise.size());
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto it = quantise.find(i);
    if (it == quantise.end()) {
      tensors.push_back({layout[i].name, layout[i].shape, model.params().tensor(i)});
      continue;
    }
    const int64_t K = it->second, rows = static_cast<int64_t>(layout[i].numel) / K;
    const size_t row_bytes = quant_row_bytes(type, K, layout[i].name);
    blocks.emplace_back(static_cast<size_t>(rows) * row_bytes);
    quantize_rows(type, model.params().tensor(i), rows, K, K, blocks.back().data(), layout[i].name);
    TensorToWrite t{layout[i].name, {rows, static_cast<int64_t>(row_bytes)}};
    t.u8 = blocks.back().data();
    tensors.push_back(t);
    metadata[kQuantTensorPrefix + layout[i].name] = quant_type_name(type);
  }
  metadata["format"] = kModelFormat;
  metadata["format_version"] = std::to_string(kModelFormatVersion);
  metadata["config"] = model.config().to_json();
  metadata[kQuantizationKey] = quant_type_name(type);
  write_safetensors(path, tensors, metadata);
}

void prepare_loaded_for_inference(Model& model, DecodePrecision precision,
                                  const std::string& option) {
  if (model.weights_complete()) return model.prepare_inference(precision);
  RETNET_CHECK(precision == DecodePrecision::F32 || precision == model.decode_precision(),
               "{} {}: the model file is quantised ({}); quantise the float32 model to another "
               "type instead",
               option, decode_precision_name(precision),
               decode_precision_name(model.decode_precision()));
}

namespace {

// A block's f16 scale (and Q4_1's minimum) with an all-ones exponent is infinite or NaN.
void check_scales(QuantType type, const SafetensorsTensor& t, const std::string& path) {
  const size_t block = static_cast<size_t>(quant_block_bytes(type));
  const int halves = type == QuantType::Q4_1 ? 2 : 1;
  for (size_t b = 0; b < t.nbytes / block; ++b)
    for (int h = 0; h < halves; ++h) {
      const uint8_t* p = t.data + b * block + 2 * h;
      const unsigned bits = p[0] | p[1] << 8;
      RETNET_CHECK((bits & 0x7c00u) != 0x7c00u, "'{}': tensor '{}' has a non-finite {} in block {}",
                   path, t.name, h == 0 ? "scale" : "minimum", b);
    }
}

}  // namespace

Model load_quantized_file(const SafetensorsFile& file, const Config& config, LoadInfo& li) {
  const std::string& path = file.path();
  const auto& meta = file.metadata();
  const QuantType type = parse_quant_type(meta.at(kQuantizationKey),
                                          "'" + path + "': metadata \"" + kQuantizationKey + "\"");
  ModelTensors idx;
  const ParamLayout layout = make_param_layout(config, &idx);
  std::set<std::string> names;
  for (const auto& e : layout.entries()) names.insert(e.name);
  for (const auto& t : file.tensors())
    RETNET_CHECK(names.count(t.name),
                 "'{}' has a tensor '{}' that a RetNet with this config does "
                 "not have",
                 path, t.name);

  // The file as a loader's source: the projections' blocks, copied as they are, and the other
  // tensors (embedding, norms, a head kept in f32) read as float32.
  LoadPlan plan(decode_precision_of(type));
  WeightSource& source = plan.source;
  std::set<std::string> f32_dtypes;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamEntry& e = layout[i];
    const SafetensorsTensor* t = file.find(e.name);
    RETNET_CHECK(t != nullptr, "'{}' is missing tensor '{}'", path, e.name);
    const auto q = meta.find(kQuantTensorPrefix + e.name);
    if (q == meta.end()) {
      RETNET_CHECK(
          t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16" || t->dtype == "F64",
          "'{}': tensor '{}' has dtype {} but the metadata has no \"{}{}\" entry "
          "naming its quantisation",
          path, e.name, t->dtype, kQuantTensorPrefix, e.name);
      RETNET_CHECK(t->shape == e.shape, "'{}': tensor '{}' has the wrong shape for the config",
                   path, e.name);
      f32_dtypes.insert(t->dtype);
      continue;
    }
    RETNET_CHECK(q->second == quant_type_name(type),
                 "'{}': tensor '{}' is stored as {} but the file says {} (one type per file)", path,
                 e.name, q->second, quant_type_name(type));
    RETNET_CHECK(t->dtype == "U8", "'{}': quantised tensor '{}' has dtype {}; expected U8", path,
                 e.name, t->dtype);
    const int64_t K = e.shape.back(), rows = static_cast<int64_t>(e.numel) / K;
    const size_t row_bytes = quant_row_bytes(type, K, "'" + path + "': tensor '" + e.name + "'");
    RETNET_CHECK(t->shape == std::vector<int64_t>({rows, static_cast<int64_t>(row_bytes)}),
                 "'{}': quantised tensor '{}' holds {} bytes, but its shape [{}, {}] in {} takes "
                 "{} rows of {} bytes (the blocks hold their scales)",
                 path, e.name, t->nbytes, rows, K, quant_type_name(type), rows, row_bytes);
    check_scales(type, *t, path);
    release_mapped(t->data, t->nbytes);
    source.quantised[i] = {t->data, t->nbytes};
  }
  source.release_quantised = true;  // pages of the read-only mapped file
  source.read = [&](size_t i, float* out, bool) {
    copy_as_float32(*file.find(layout[i].name), out);
    for (size_t j = 0; j < layout[i].numel; ++j)
      RETNET_CHECK(std::isfinite(out[j]), "'{}': tensor '{}' holds a non-finite value at index {}",
                   path, layout[i].name, j);
  };
  Model model(config, ParamBuffer(layout));  // zeros: no memory until filled
  for (auto [index, K] : model.projection_tensors())
    RETNET_CHECK(source.quantised.count(index) || index == idx.output_projection,
                 "'{}': projection '{}' is not quantised (the metadata lacks \"{}{}\")", path,
                 layout[index].name, kQuantTensorPrefix, layout[index].name);
  plan.keep_head_f32 = !source.quantised.count(idx.output_projection);
  model.prepare_inference(plan);

  li.zero_copy = false;
  li.torchscale = false;
  li.source_dtype = std::string(quant_type_name(type));
  for (const auto& d : f32_dtypes) li.source_dtype += "+" + d;
  li.weight_files = {path};
  for (const auto& t : file.tensors()) li.stored_bytes += static_cast<int64_t>(t.nbytes);
  return model;
}

}  // namespace retnet
