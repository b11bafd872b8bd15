#include "retnet/model/model_io.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "retnet/core/error.h"
#include "retnet/core/mapped_file.h"
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

// A model file (ours, a torchscale export, or a quantised one) opened and checked against its
// config: every tensor by name, dtype and shape; values not read yet.
struct OpenedFile {
  SafetensorsFile file;
  Config config;
  LoadInfo info;
  std::string prefix;  // fairseq checkpoints prefix every name with "decoder."
  ParamLayout layout;
  bool quantised = false;   // projections stored quantised (`retnet quantize`): quant_io.cpp
  bool contiguous = false;  // the file holds our float32 buffer byte for byte, aligned

  const SafetensorsTensor& tensor(size_t i) const { return *file.find(prefix + layout[i].name); }
  // Tensor i's float32 values into `out`, checked finite.
  void read(size_t i, float* out) const {
    copy_as_float32(tensor(i), out);
    check_finite(out, i);
  }
  void check_finite(const float* w, size_t i) const {
    for (size_t j = 0; j < layout[i].numel; ++j)
      RETNET_CHECK(std::isfinite(w[j]),
                   "'{}': tensor '{}' holds a non-finite value ({}) at index {}", file.path(),
                   layout[i].name, w[j], j);
  }
};

OpenedFile open_file(const std::string& path, const std::optional<Config>& config_override) {
  OpenedFile f{SafetensorsFile::open(path)};
  LoadInfo& li = f.info;
  const auto& meta = f.file.metadata();
  auto fmt_it = meta.find("format");
  li.torchscale = fmt_it == meta.end() || fmt_it->second != kModelFormat;
  if (!li.torchscale) {
    auto v = meta.find("format_version");
    RETNET_CHECK(v != meta.end() && v->second == std::to_string(kModelFormatVersion),
                 "'{}' has model format version {}; this engine reads version {}", path,
                 v == meta.end() ? "(none)" : v->second, kModelFormatVersion);
  }
  Config& config = f.config;
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
  f.quantised = meta.count(kQuantizationKey) > 0;
  if (f.quantised) return f;  // its tensors are checked by load_quantized_file

  const SafetensorsFile& file = f.file;
  if (!file.tensors().empty() && file.find("embed_tokens.weight") == nullptr &&
      file.find("decoder.embed_tokens.weight") != nullptr)
    f.prefix = "decoder.";
  const std::string& prefix = f.prefix;

  f.layout = make_param_layout(config);
  const ParamLayout& layout = f.layout;
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
  contiguous &= reinterpret_cast<uintptr_t>(file.data_section() + base) % alignof(float) == 0;
  f.contiguous = contiguous;
  li.weight_files = {path};
  for (const auto& t : file.tensors()) li.stored_bytes += static_cast<int64_t>(t.nbytes);
  return f;
}

// The whole float32 model of an opened float file: the file's mapping itself when it holds our
// buffer, else converted.
Model whole_model(OpenedFile& f) {
  const ParamLayout& layout = f.layout;
  ParamBuffer params;
  if (f.contiguous) {
    uint8_t* first = f.file.data_section() + f.tensor(0).data_offset;
    params = ParamBuffer::borrow(layout, reinterpret_cast<float*>(first), f.file.mapping());
    f.info.zero_copy = true;
    for (size_t i = 0; i < layout.size(); ++i) f.check_finite(params.tensor(i), i);
  } else {
    params = ParamBuffer(layout);
    for (size_t i = 0; i < layout.size(); ++i) f.read(i, params.tensor(i));
  }
  return Model(f.config, std::move(params));
}

Model load_file(const std::string& path, const std::optional<Config>& config_override,
                LoadInfo* info) {
  OpenedFile f = open_file(path, config_override);
  // A quantised file comes back prepared in its own type.
  Model model = f.quantised ? load_quantized_file(f.file, f.config, f.info) : whole_model(f);
  if (info) *info = f.info;
  return model;
}

// The model prepared for inference in one pass over the file: each tensor read (converted,
// checked finite) straight into the prepared weights, never a whole float32 copy; in f32, a file
// that holds our buffer is that buffer. A quantised file: its blocks copied
// (load_quantized_file), in its own type only.
Model load_file_for_inference(const std::string& path,
                              const std::optional<Config>& config_override,
                              DecodePrecision precision, LoadInfo* info, double& open_seconds) {
  const auto start = std::chrono::steady_clock::now();
  OpenedFile f = open_file(path, config_override);
  open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (f.quantised) {
    Model model = load_quantized_file(f.file, f.config, f.info);
    prepare_loaded_for_inference(model, precision, "dtype");  // its own type, or refused
    if (info) *info = f.info;
    return model;
  }
  if (precision == DecodePrecision::F32 && f.contiguous) {
    // The mapping is our buffer byte for byte, and f32 keeps no smaller copy: the pass reads the
    // mapping where it lies (docs/design-notes.md#loading-a-float32-file) instead of copying it.
    Model model = whole_model(f);
    if (info) *info = f.info;
    // The file's own handle on the mapping goes, so that the model's buffer is its sole holder
    // and the pass releases each product's pages as it packs it.
    { const OpenedFile closing = std::move(f); }
    model.prepare_inference(precision);
    return model;
  }
  Model model(f.config, ParamBuffer(f.layout));  // zeros: no memory until filled
  LoadPlan plan(precision);
  plan.source.read = [&f](size_t i, float* out, bool release) {
    f.read(i, out);
    if (release) release_mapped(f.tensor(i).data, f.tensor(i).nbytes);
  };
  model.prepare_inference(plan);
  if (info) *info = f.info;
  return model;
}

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
    double open_seconds = 0;
    model.emplace(load_file_for_inference(path, config, precision, info, open_seconds));
    if (info) {
      info->open_seconds = open_seconds;
      info->prepare_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
          open_seconds;
    }
  }
  if (info)
    info->load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::move(*model);
}

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
