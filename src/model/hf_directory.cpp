// Hugging Face model directories: tensor names, shards and their index, loading and writing.
#include "retnet/model/hf_directory.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/half.h"
#include "retnet/core/mapped_file.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/hf_layout.h"
#include "retnet/model/model.h"

namespace retnet {
namespace fs = std::filesystem;
namespace {

// The engine's names inside one layer (after "layers.N.") and fla's, for the model's tensors. A
// layer's mixer is fla's "attn" (its tensors named by its description) after the norm "attn_norm".
const std::pair<const char*, const char*> kFlaLayerNames[] = {
    {"ffn.fc1.weight", "mlp.gate_proj.weight"},  // swish(gate_proj x) * up_proj x
    {"ffn.gate.weight", "mlp.up_proj.weight"},
    {"ffn.fc2.weight", "mlp.down_proj.weight"},
    {"final_layer_norm.weight", "mlp_norm.weight"},
};

// fla's names of a tensor inside a layer (the first is the one written; empty: it has none).
std::vector<std::string> fla_layer_names(const std::string& name) {
  for (const auto& [ours, theirs] : kFlaLayerNames)
    if (name == ours) return {theirs};
  for (const MixerSpec* m : mixer_registry()) {
    if (!m->hf || m->hf->fla.role == detail::HfRole::None) continue;
    const std::string scope = m->scope;
    if (name == scope + "_layer_norm.weight") return {"attn_norm.weight"};
    if (name.rfind(scope + ".", 0) != 0) continue;
    for (const detail::HfTensorName& n : m->hf->fla.names) {
      if (name.substr(scope.size() + 1) != n.engine) continue;
      std::vector<std::string> names = {std::string("attn.") + (n.layout ? n.layout : n.engine)};
      if (n.also) names.push_back(std::string("attn.") + n.also);
      return names;
    }
  }
  return {};
}

// fla's names of one of the engine's tensors in a layer (empty: none, or not in a layer).
std::vector<std::string> fla_names(const std::string& engine_name) {
  static const std::regex layer(R"(layers\.(\d+)\.(.*))");
  std::smatch m;
  if (!std::regex_match(engine_name, m, layer)) return {};
  std::vector<std::string> names = fla_layer_names(m[2].str());
  for (std::string& n : names) n = "model.layers." + m[1].str() + "." + n;
  return names;
}

std::string shape_str(const std::vector<int64_t>& s) {
  return "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
}

// Whether `p` exists; a failure to look (permission, symbolic-link loop) is an Error naming it.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  const bool exists = fs::exists(p, ec);
  if (ec) throw_file_error("access", p.string(), ec);
  return exists;
}

// The weight files: the index's shards (every one must exist and hold what the index says), or
// model.safetensors.
struct Shards {
  std::vector<std::string> files;
  std::vector<SafetensorsFile> opened;
  std::map<std::string, const SafetensorsTensor*> by_name;
  std::map<std::string, std::string> file_of;  // tensor -> file
};

Shards open_shards(const std::string& dir) {
  Shards s;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  const fs::path single = fs::path(dir) / "model.safetensors";
  // Both present: two models in one directory, and nothing says which one is meant.
  RETNET_CHECK(!(path_exists(index) && path_exists(single)),
               "'{}' holds both '{}' and '{}': two sets of weights; remove the one that is not "
               "this model's",
               dir, single.filename().string(), index.filename().string());
  if (path_exists(index)) {
    const nlohmann::json j = parse_json(read_file(index.string(), "shard index"), index.string());
    RETNET_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                 "{}: no 'weight_map' object", index.string());
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      RETNET_CHECK(it.value().is_string(), "{}: weight_map['{}'] is not a file name",
                   index.string(), it.key());
      const std::string file = it.value().get<std::string>();
      RETNET_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(),
                   "{}: weight_map['{}'] = '{}' is not a file in the directory", index.string(),
                   it.key(), file);
      weight_map[it.key()] = file;
      files.insert(file);
    }
    s.files.assign(files.begin(), files.end());
  } else if (path_exists(single)) {
    s.files = {"model.safetensors"};
  } else {
    throw Error(
        fmt::format("'{}' has neither model.safetensors nor model.safetensors.index.json", dir));
  }
  s.opened.reserve(s.files.size());
  for (const std::string& f : s.files) {
    const fs::path p = fs::path(dir) / f;
    RETNET_CHECK(path_exists(p), "'{}': the shard '{}' named by the index is missing", dir, f);
    s.opened.push_back(SafetensorsFile::open(p.string()));
  }
  for (size_t i = 0; i < s.opened.size(); ++i)
    for (const SafetensorsTensor& t : s.opened[i].tensors()) {
      RETNET_CHECK(!s.by_name.count(t.name), "'{}': tensor '{}' is stored twice ({} and {})", dir,
                   t.name, s.file_of[t.name], s.files[i]);
      s.by_name[t.name] = &t;
      s.file_of[t.name] = s.files[i];
    }
  for (const auto& [name, file] : weight_map) {
    auto it = s.file_of.find(name);
    RETNET_CHECK(it != s.file_of.end() && it->second == file,
                 "{}: the index puts tensor '{}' in '{}', which does not hold it", index.string(),
                 name, file);
  }
  return s;
}

void check_finite(const float* w, size_t n, const std::string& file, const std::string& name,
                  const std::string& engine_name) {
  for (size_t j = 0; j < n; ++j)
    RETNET_CHECK(std::isfinite(w[j]),
                 "'{}': tensor '{}' (the engine's '{}') holds a non-finite value ({}) at index {}",
                 file, name, engine_name, w[j], j);
}

}  // namespace

std::string hf_tensor_name(const std::string& engine_name, HfFlavour flavour) {
  return hf_tensor_names_accepted(engine_name, flavour).front();
}

std::vector<std::string> hf_tensor_names_accepted(const std::string& engine_name,
                                                  HfFlavour flavour) {
  if (engine_name == "output_projection.weight") return {"lm_head.weight"};
  if (flavour == HfFlavour::Syncdoth) return {"model." + engine_name};
  if (engine_name == "embed_tokens.weight") return {"model.embeddings.weight"};
  if (engine_name == "layer_norm.weight") return {"model.norm.weight"};
  std::vector<std::string> names = fla_names(engine_name);
  RETNET_CHECK(!names.empty(), "tensor '{}' has no name in flash-linear-attention's layout",
               engine_name);
  return names;
}

bool is_hf_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

namespace {

// A directory whose every tensor is found, typed and shaped as its config needs; values not read.
struct ResolvedDirectory {
  HfLoadInfo li;
  std::string config_path;
  Shards shards;
  ModelTensors idx;
  ParamLayout layout;
  std::vector<const SafetensorsTensor*> source;  // per layout entry
  std::vector<std::string> names;                // the file's name of each
  const SafetensorsTensor* tied_head = nullptr;  // an lm_head stored beside a tied embedding

  // Layout entry i's float32 values into `out`: converted, checked finite, the file's pages
  // released unless `keep_pages` (weights used in place: the pages are the weights).
  void fill(size_t i, float* out, bool keep_pages = false) const {
    const SafetensorsTensor& t = *source[i];
    const std::string& file = shards.file_of.at(names[i]);
    copy_as_float32(t, out);
    check_finite(out, layout[i].numel, file, names[i], layout[i].name);
    if (!keep_pages) release_mapped(t.data, t.nbytes);
    if (i == idx.embed && tied_head) {  // a stored head must equal the embedding it is tied to
      std::vector<float> values(layout[i].numel);
      copy_as_float32(*tied_head, values.data());
      check_tied_head(std::equal(values.begin(), values.end(), out));
    }
  }
  void check_tied_head(bool equal) const {
    const std::string head = tied_head->name;
    RETNET_CHECK(equal,
                 "'{}': tensor '{}' differs from the embedding, but config.json ties them "
                 "(tie_word_embeddings)",
                 shards.file_of.at(head), head);
  }

  // Layout entry i where it lies when it is stored in element type `type` (row-major, as every
  // safetensors tensor is), else nullptr.
  const void* stored_as(size_t i, ElementType type) const {
    const char* dtype = type == ElementType::F32    ? "F32"
                        : type == ElementType::F16  ? "F16"
                        : type == ElementType::BF16 ? "BF16"
                                                    : "";
    return source[i]->dtype == dtype ? source[i]->data : nullptr;
  }
};

ResolvedDirectory resolve_directory(const std::string& dir) {
  ResolvedDirectory r;
  r.config_path = (fs::path(dir) / "config.json").string();
  HfLoadInfo& li = r.li;
  li.hf = parse_hf_config(read_file(r.config_path, "model config"), r.config_path);
  const HfFlavour flavour = li.hf.flavour;
  const Config& config = li.hf.config;
  r.shards = open_shards(dir);
  Shards& shards = r.shards;
  li.weight_files = shards.files;
  r.layout = make_param_layout(config, &r.idx);
  const ParamLayout& layout = r.layout;
  std::set<std::string> used;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamEntry& e = layout[i];
    const SafetensorsTensor* t = nullptr;
    std::string name;
    for (const std::string& candidate : hf_tensor_names_accepted(e.name, flavour))
      if (auto it = shards.by_name.find(candidate); it != shards.by_name.end()) {
        t = it->second;
        name = candidate;
        break;
      }
    RETNET_CHECK(t != nullptr, "'{}' has no tensor '{}' ({} layout, {} layers)", dir,
                 hf_tensor_name(e.name, flavour), hf_flavour_name(flavour), config.layers);
    const std::string& file = shards.file_of[name];
    RETNET_CHECK(t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16",
                 "'{}': tensor '{}' has dtype {}; expected F32, F16 or BF16", file, name, t->dtype);
    RETNET_CHECK(t->shape == e.shape, "'{}': tensor '{}' has shape {}; {} needs {}", file, name,
                 shape_str(t->shape), r.config_path, shape_str(e.shape));
    r.source.push_back(t);
    r.names.push_back(name);
    used.insert(name);
    ++li.stored_dtypes[t->dtype];
    li.stored_bytes += static_cast<int64_t>(t->nbytes);
  }
  // A tied head is the embedding (one tensor); a file that stores it anyway must store it equal.
  const std::string head = hf_tensor_name("output_projection.weight", flavour);
  if (config.tie_embeddings && shards.by_name.count(head)) {
    const SafetensorsTensor& t = *shards.by_name[head];
    RETNET_CHECK(t.shape == layout[r.idx.embed].shape && t.dtype == r.source[r.idx.embed]->dtype,
                 "'{}': tensor '{}' has shape {} ({}); the tied embedding is {} ({})",
                 shards.file_of[head], head, shape_str(t.shape), t.dtype,
                 shape_str(layout[r.idx.embed].shape), r.source[r.idx.embed]->dtype);
    r.tied_head = &t;
    used.insert(head);
  }
  for (const auto& [name, t] : shards.by_name) {
    if (used.count(name)) continue;
    // syncdoth's rotation and decay buffers follow from the config.
    if (flavour == HfFlavour::Syncdoth && name.rfind("model.retnet_rel_pos.", 0) == 0) continue;
    throw Error(fmt::format("'{}': tensor '{}' is not part of a RetNet with this config ({})",
                            shards.file_of[name], name, r.config_path));
  }
  return r;
}

}  // namespace

Model load_hf_directory(const std::string& dir, HfLoadInfo* info) {
  ResolvedDirectory r = resolve_directory(dir);
  ParamBuffer params(r.layout);
  for (size_t i = 0; i < r.layout.size(); ++i) r.fill(i, params.tensor(i));
  Model model(r.li.hf.config, std::move(params));
  if (info) *info = std::move(r.li);
  return model;
}

Model load_hf_directory_for_inference(const std::string& dir, DecodePrecision precision,
                                      HfLoadInfo* info, bool in_place) {
  const auto start = std::chrono::steady_clock::now();
  auto r = std::make_shared<const ResolvedDirectory>(resolve_directory(dir));
  const auto opened = std::chrono::steady_clock::now();
  Model model(r->li.hf.config, ParamBuffer(r->layout));  // zeros: no memory until filled
  // The directory as a loader's source: every tensor read from the mapped shards (converted,
  // checked finite), and where it lies for those stored in the precision's type. `r` (and with
  // it the mappings) lives in the model when they are used in place.
  LoadPlan plan(precision);
  plan.in_place = in_place;
  WeightSource& source = plan.source;
  source.read = [r](size_t i, float* out, bool release) { r->fill(i, out, !release); };
  source.stored_as = [r](size_t i, ElementType type) { return r->stored_as(i, type); };
  source.keep_alive = r;
  for (size_t i = 0; i < r->layout.size(); ++i)
    source.origins.push_back(
        fmt::format("tensor '{}' of '{}'", r->names[i],
                    (fs::path(dir) / r->shards.file_of.at(r->names[i])).string()));
  // A tied embedding used in place is never read: its stored head is compared without converting.
  if (in_place && r->tied_head && r->stored_as(r->idx.embed, decode_element_type(precision))) {
    const SafetensorsTensor& e = *r->source[r->idx.embed];
    r->check_tied_head(std::memcmp(e.data, r->tied_head->data, e.nbytes) == 0);
  }
  model.prepare_inference(plan);
  if (info) {
    *info = r->li;
    info->open_seconds = std::chrono::duration<double>(opened - start).count();
    info->prepare_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
  }
  return model;
}

void save_hf_directory(const Model& model, const std::string& dir, HfFlavour flavour,
                       const std::string& dtype,
                       const std::map<std::string, std::string>& tokenizer_files, int64_t bos,
                       int64_t eos, int64_t pad) {
  RETNET_CHECK(dtype == "f32" || dtype == "bf16", "--dtype must be f32 or bf16, got '{}'", dtype);
  model.require_complete_weights("exporting the model");
  const std::string config = hf_config_json(model.config(), flavour, bos, eos, pad);
  std::error_code ec;
  fs::create_directories(dir, ec);
  RETNET_CHECK(!ec, "cannot create '{}': {}", dir, ec.message());
  // An earlier model's files that this export would not replace (a shard index and its shards, a
  // tokenizer of another kind) would be read beside the new model by later loads: refused by name.
  std::vector<std::string> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == "model.safetensors.index.json" ||
                         (name != "model.safetensors" && name.size() > 12 &&
                          name.compare(name.size() - 12, 12, ".safetensors") == 0);
    const bool tokenizer =
        (name == "tokenizer.json" || name == "tokenizer.model" || name == "tokenizer_config.json" ||
         name == "special_tokens_map.json" || name == "chat_template.jinja") &&
        !tokenizer_files.count(name);
    if (weights || tokenizer) stale.push_back(name);
  }
  if (ec) throw_file_error("list", dir, ec);
  std::sort(stale.begin(), stale.end());
  RETNET_CHECK(stale.empty(),
               "'{}' holds files of an earlier model that this export would not replace ({}); "
               "later loads would read them with the new model: remove them or give another "
               "output directory",
               dir, fmt::format("{}", fmt::join(stale, ", ")));
  const auto& layout = model.params().layout();
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < layout.size(); ++i) {
    TensorToWrite t{hf_tensor_name(layout[i].name, flavour), layout[i].shape,
                    model.params().tensor(i)};
    t.as_bf16 = dtype == "bf16";  // converted while streaming into the file: no second copy
    tensors.push_back(t);
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / "config.json").string(), config + "\n");
  nlohmann::ordered_json gen = nlohmann::ordered_json::object();  // "{}", never "null"
  if (bos >= 0) gen["bos_token_id"] = bos;
  if (eos >= 0) gen["eos_token_id"] = eos;
  if (pad >= 0) gen["pad_token_id"] = pad;
  write_file_atomically((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
  for (const auto& [name, bytes] : tokenizer_files)
    write_file_atomically((fs::path(dir) / name).string(), bytes);
}

}  // namespace retnet
