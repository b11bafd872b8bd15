#include "retnet/model/model_io.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "retnet/core/error.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/quant_io.h"
#include "retnet/ops/rotation.h"

namespace retnet {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
}

// torchscale's rotation and decay buffers must describe the same model as our config: a mismatch
// means the config does not belong to this file.
void check_rel_pos_buffers(const SafetensorsFile& file, const std::string& prefix,
                           const Config& config) {
  if (const auto* t = file.find(prefix + "retnet_rel_pos.angle")) {
    const int64_t dk = config.key_dim();
    RETNET_CHECK(t->numel() == dk,
                 "'{}': retnet_rel_pos.angle has {} values, the config's key dim "
                 "per head is {}",
                 file.path(), t->numel(), dk);
    std::vector<float> angle(dk);
    copy_as_float32(*t, angle.data());
    const std::vector<double> theta = rotation_thetas(dk);
    for (int64_t i = 0; i < dk; ++i)
      RETNET_CHECK(std::fabs(angle[i] - theta[i / 2]) <= 1e-5 * std::max(1.0, theta[i / 2]),
                   "'{}': retnet_rel_pos.angle[{}] = {} but torchscale's rotation gives {}",
                   file.path(), i, angle[i], theta[i / 2]);
  }
  if (const auto* t = file.find(prefix + "retnet_rel_pos.decay")) {
    RETNET_CHECK(t->numel() == config.heads,
                 "'{}': retnet_rel_pos.decay has {} values for {} heads", file.path(), t->numel(),
                 config.heads);
    std::vector<float> decay(config.heads);
    copy_as_float32(*t, decay.data());
    for (int64_t h = 0; h < config.heads; ++h) {
      double expect = std::log(config.gamma(h));
      RETNET_CHECK(std::fabs(decay[h] - expect) <= 1e-5 * std::fabs(expect),
                   "'{}': retnet_rel_pos.decay[{}] = {} but the config's decay gives log(gamma) = "
                   "{} (set \"decay\" in the config to match the file)",
                   file.path(), h, decay[h], expect);
    }
  }
}

}  // namespace

namespace {

// A directory, loaded whole (no `precision`) or for inference in `precision`.
Model load_directory(const std::string& path, const std::optional<Config>& config_override,
                     LoadInfo* info, const std::optional<DecodePrecision>& precision = {},
                     bool in_place = true) {
  RETNET_CHECK(is_hf_directory(path), "'{}' is a directory without a config.json", path);
  RETNET_CHECK(!config_override, "'{}': a model directory carries its config.json; --config-json "
                                 "is for single files",
               path);
  HfLoadInfo hi;
  Model model = precision ? load_hf_directory_for_inference(path, *precision, &hi, in_place)
                          : load_hf_directory(path, &hi);
  if (info) {
    info->open_seconds = hi.open_seconds;
    info->prepare_seconds = hi.prepare_seconds;
    info->flavour = hf_flavour_name(hi.hf.flavour);
    info->weight_files = hi.weight_files;
    info->stored_bytes = hi.stored_bytes;
    info->bos_id = hi.hf.bos_id;
    info->pad_id = hi.hf.pad_id;
    info->eos_id = hi.hf.eos_id;
    for (const auto& [dtype, count] : hi.stored_dtypes)
      info->source_dtype += (info->source_dtype.empty() ? "" : "+") + dtype;
  }
  return model;
}

Model load_file(const std::string& path, const std::optional<Config>& config_override,
                LoadInfo* info);

}  // namespace

Model load_model(const std::string& path, const std::optional<Config>& config_override,
                 LoadInfo* info) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  Model model = std::filesystem::is_directory(path, ec)
                    ? load_directory(path, config_override, info)
                    : load_file(path, config_override, info);
  if (info)
    info->load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Model load_model_for_inference(const std::string& path, const std::optional<Config>& config,
                               DecodePrecision precision, LoadInfo* info, bool in_place) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  std::optional<Model> model;
  if (std::filesystem::is_directory(path, ec)) {
    model.emplace(load_directory(path, config, info, precision, in_place));
  } else {
    model.emplace(load_file(path, config, info));
    const auto opened = std::chrono::steady_clock::now();
    // A quantised file comes prepared in its own type.
    prepare_loaded_for_inference(*model, precision, "dtype");
    if (info) {
      info->open_seconds = std::chrono::duration<double>(opened - start).count();
      info->prepare_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
    }
  }
  if (info)
    info->load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::move(*model);
}

namespace {

Model load_file(const std::string& path, const std::optional<Config>& config_override,
                LoadInfo* info) {
  SafetensorsFile file = SafetensorsFile::open(path);
  LoadInfo li;
  const auto& meta = file.metadata();
  auto fmt_it = meta.find("format");
  li.torchscale = fmt_it == meta.end() || fmt_it->second != kModelFormat;
  if (!li.torchscale) {
    auto v = meta.find("format_version");
    RETNET_CHECK(v != meta.end() && v->second == std::to_string(kModelFormatVersion),
                 "'{}' has model format version {}; this engine reads version {}", path,
                 v == meta.end() ? "(none)" : v->second, kModelFormatVersion);
  }
  Config config;
  if (config_override) {
    config = *config_override;
  } else {
    auto c = meta.find("config");
    RETNET_CHECK(c != meta.end(),
                 "'{}' holds no config (a torchscale export?); give its config JSON with "
                 "--config-json",
                 path);
    config = Config::from_json(c->second, path + " (metadata config)");
  }
  config.validate();
  if (meta.count(kQuantizationKey)) {  // projections stored quantised (`retnet quantize`)
    Model model = load_quantized_file(file, config, li);
    if (info) *info = li;
    return model;
  }

  // fairseq checkpoints prefix every name with "decoder.".
  std::string prefix;
  if (!file.tensors().empty() && file.find("embed_tokens.weight") == nullptr &&
      file.find("decoder.embed_tokens.weight") != nullptr)
    prefix = "decoder.";

  ModelTensors idx;
  ParamLayout layout = make_param_layout(config, &idx);
  std::set<std::string> expected_names;
  for (const auto& e : layout.entries()) expected_names.insert(prefix + e.name);
  for (const auto& t : file.tensors()) {
    if (expected_names.count(t.name)) continue;
    if (t.name == prefix + "retnet_rel_pos.angle" || t.name == prefix + "retnet_rel_pos.decay")
      continue;
    throw Error(
        fmt::format("'{}' has a tensor '{}' that a RetNet with this config does not have "
                    "(config: {} layers)",
                    path, t.name, config.layers));
  }
  check_rel_pos_buffers(file, prefix, config);

  // Validate every tensor; note whether the file already is our buffer, byte for byte.
  bool contiguous = true;
  size_t base = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamEntry& e = layout[i];
    const SafetensorsTensor* t = file.find(prefix + e.name);
    RETNET_CHECK(t != nullptr, "'{}' is missing tensor '{}'", path, prefix + e.name);
    RETNET_CHECK(t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16" || t->dtype == "F64",
                 "'{}': tensor '{}' has dtype {}; expected F32 (or F16, BF16, F64)", path, t->name,
                 t->dtype);
    RETNET_CHECK(t->shape == e.shape, "'{}': tensor '{}' has shape {}, the config needs {}", path,
                 t->name, shape_str(t->shape), shape_str(e.shape));
    if (i == 0) base = t->data_offset;
    contiguous &= t->dtype == "F32" && t->data_offset == base + e.offset * sizeof(float);
    if (li.source_dtype.empty()) li.source_dtype = t->dtype;
  }
  uint8_t* first = file.data_section() + base;
  contiguous &= reinterpret_cast<uintptr_t>(first) % alignof(float) == 0;

  ParamBuffer params;
  if (contiguous) {
    params = ParamBuffer::borrow(layout, reinterpret_cast<float*>(first), file.mapping());
    li.zero_copy = true;
  } else {
    params = ParamBuffer(layout);
    for (size_t i = 0; i < layout.size(); ++i)
      copy_as_float32(*file.find(prefix + layout[i].name), params.tensor(i));
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    const float* w = params.tensor(i);
    for (size_t j = 0; j < layout[i].numel; ++j)
      RETNET_CHECK(std::isfinite(w[j]),
                   "'{}': tensor '{}' holds a non-finite value ({}) at index {}", path,
                   layout[i].name, w[j], j);
  }
  li.weight_files = {path};
  for (const auto& t : file.tensors()) li.stored_bytes += static_cast<int64_t>(t.nbytes);
  if (info) *info = li;
  return Model(config, std::move(params));
}

}  // namespace

void save_model(const Model& model, const std::string& path,
                const std::map<std::string, std::string>& extra_metadata) {
  model.require_complete_weights("saving the model");
  std::vector<TensorToWrite> tensors;
  const auto& layout = model.params().layout();
  for (size_t i = 0; i < layout.size(); ++i)
    tensors.push_back({layout[i].name, layout[i].shape, model.params().tensor(i)});
  std::map<std::string, std::string> metadata = extra_metadata;
  metadata["format"] = kModelFormat;
  metadata["format_version"] = std::to_string(kModelFormatVersion);
  metadata["config"] = model.config().to_json();
  write_safetensors(path, tensors, metadata);
}

}  // namespace retnet
