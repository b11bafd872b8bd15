#include "retnet/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "retnet-checkpoint";
constexpr const char* kPrefix = "checkpoint-";

uint64_t checksum(const float* a, const float* b, const float* c, size_t n) {
  uint64_t h = fnv1a(a, n * 4);
  h = fnv1a(b, n * 4, h);
  return fnv1a(c, n * 4, h);
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || e.path().extension() != ".safetensors") continue;
    try {
      found.emplace_back(std::stoll(name.substr(std::strlen(kPrefix))), e.path());
    } catch (...) {
    }
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return found;
}

}  // namespace

std::vector<std::string> list_checkpoint_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& [step, path] : list_checkpoints(dir)) files.push_back(path.string());
  return files;
}

void save_checkpoint(const std::string& dir, const Model& model, AdamW& opt,
                     const CheckpointInfo& info, int keep_last,
                     const std::map<std::string, std::string>& extra_metadata) {
  fs::create_directories(dir);
  const int64_t n = static_cast<int64_t>(model.params().size());
  const float* p = model.params().data();
  const float* m = opt.first_moment().data();
  const float* v = opt.second_moment().data();
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"format_version", "1"},
      {"config", model.config().to_json()},
      {"step", std::to_string(info.step)},
      {"total_steps", std::to_string(info.total_steps)},
      {"seed", std::to_string(info.seed)},
      {"run", info.run_json},
      {"checksum", std::to_string(checksum(p, m, v, static_cast<size_t>(n)))}};
  meta.insert(extra_metadata.begin(), extra_metadata.end());
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld.safetensors", kPrefix, static_cast<long long>(info.step));
  write_safetensors((fs::path(dir) / name).string(),
                    {{"params", {n}, p}, {"adam_m", {n}, m}, {"adam_v", {n}, v}}, meta);
  auto all = list_checkpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep_last, 1)); i < all.size(); ++i)
    fs::remove(all[i].second);
}

std::optional<CheckpointInfo> load_latest_checkpoint(const std::string& dir, Model& model,
                                                     AdamW& opt) {
  for (const auto& [step, path] : list_checkpoints(dir)) {
    try {
      SafetensorsFile f = SafetensorsFile::open(path.string());
      const auto& meta = f.metadata();
      RETNET_CHECK(meta.count("format") && meta.at("format") == kFormat,
                   "'{}' is not a retnet checkpoint", path.string());
      Config c = Config::from_json(meta.at("config"), path.string());
      RETNET_CHECK(c.to_json() == model.config().to_json(),
                   "'{}' was written for another model config: {}", path.string(), c.to_json());
      const size_t n = model.params().size();
      const SafetensorsTensor* tp = f.find("params");
      const SafetensorsTensor* tm = f.find("adam_m");
      const SafetensorsTensor* tv = f.find("adam_v");
      for (const auto* t : {tp, tm, tv})
        RETNET_CHECK(t && t->dtype == "F32" && static_cast<size_t>(t->numel()) == n,
                     "'{}' holds tensors that do not match the model ({} parameters)",
                     path.string(), n);
      const auto* p = reinterpret_cast<const float*>(tp->data);
      const auto* m = reinterpret_cast<const float*>(tm->data);
      const auto* v = reinterpret_cast<const float*>(tv->data);
      RETNET_CHECK(std::to_string(checksum(p, m, v, n)) == meta.at("checksum"),
                   "'{}' is damaged: checksum mismatch", path.string());
      std::memcpy(model.params().data(), p, n * 4);
      std::memcpy(opt.first_moment().data(), m, n * 4);
      std::memcpy(opt.second_moment().data(), v, n * 4);
      CheckpointInfo info;
      info.step = std::stoll(meta.at("step"));
      info.total_steps = std::stoll(meta.at("total_steps"));
      info.seed = std::stoull(meta.at("seed"));
      info.run_json = meta.count("run") ? meta.at("run") : "";
      opt.set_steps_taken(info.step);
      return info;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", path.string().c_str(), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace retnet
