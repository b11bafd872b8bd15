#include "retnet/train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/hash.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "retnet-checkpoint";
constexpr const char* kPrefix = "checkpoint-";

uint64_t checksum(const void* a, const void* b, const void* c, size_t n) {
  uint64_t h = fnv1a(a, n * 4);
  h = fnv1a(b, n * 4, h);
  return fnv1a(c, n * 4, h);
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory) throw_file_error("open", dir, ec);
    return found;
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || e.path().extension() != ".safetensors") continue;
    try {
      found.emplace_back(std::stoll(name.substr(std::strlen(kPrefix))), e.path());
    } catch (...) {
    }
  }
  if (ec) throw_file_error("list", dir, ec);
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return found;
}

// A metadata value that must be a whole decimal integer (std::stoll would read "1.5" as 1).
int64_t metadata_integer(const std::map<std::string, std::string>& meta, const char* key,
                         const std::string& path) {
  const std::string& text = meta.at(key);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  RETNET_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && value >= 0,
               "checkpoint '{}': metadata '{}' is '{}'; expected a non-negative integer", path, key,
               text);
  return value;
}

uint64_t metadata_unsigned(const std::map<std::string, std::string>& meta, const char* key,
                           const std::string& path) {
  const std::string& text = meta.at(key);
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  RETNET_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(),
               "checkpoint '{}': metadata '{}' is '{}'; expected an integer in [0, 2^64)", path,
               key, text);
  return value;
}

// Temporary files of a writer killed before its rename (".checkpoint-N.safetensors.tmp.PID",
// ".model.safetensors.tmp.PID"): the run directory's lock makes this run their only writer.
void remove_orphaned_temporaries(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name.rfind(std::string(".") + kPrefix, 0) == 0 ||
                      name.rfind(".model.safetensors.tmp.", 0) == 0;
    if (!ours || name.find(".safetensors.tmp.") == std::string::npos) continue;
    std::error_code rm;
    if (fs::remove(e.path(), rm))
      std::fprintf(stderr, "removed %s: a temporary file left by an interrupted checkpoint write\n",
                   e.path().string().c_str());
  }
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
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_file_error("create the directory", dir, ec);
  remove_orphaned_temporaries(dir);
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
    if (!fs::remove(all[i].second, ec) && ec)
      throw_file_error("remove", all[i].second.string(), ec);
}

namespace {

// Checks a checkpoint against `model` and restores parameters and moments; `named_step` is the
// step its file name says, when it has one.
CheckpointInfo restore_checkpoint(const SafetensorsFile& f, Model& model, AdamW& opt,
                                  std::optional<int64_t> named_step) {
  const std::string& path = f.path();
  const auto& meta = f.metadata();
  RETNET_CHECK(meta.count("format") && meta.at("format") == kFormat,
               "'{}' is not a retnet checkpoint", path);
  for (const char* key : {"config", "step", "total_steps", "seed", "checksum"})
    RETNET_CHECK(meta.count(key), "checkpoint '{}' has no '{}' in its metadata", path, key);
  CheckpointInfo info;
  info.step = metadata_integer(meta, "step", path);
  info.total_steps = metadata_integer(meta, "total_steps", path);
  info.seed = metadata_unsigned(meta, "seed", path);
  info.run_json = meta.count("run") ? meta.at("run") : "";
  // A file renamed or copied under another step's name would resume the wrong schedule position.
  RETNET_CHECK(!named_step || *named_step == info.step,
               "checkpoint '{}' is named for step {} but holds step {}", path, *named_step,
               info.step);
  Config c = Config::from_json(meta.at("config"), path);
  RETNET_CHECK(c.to_json() == model.config().to_json(),
               "'{}' was written for another model config: {}", path, c.to_json());
  const size_t n = model.params().size();
  const SafetensorsTensor* tp = f.find("params");
  const SafetensorsTensor* tm = f.find("adam_m");
  const SafetensorsTensor* tv = f.find("adam_v");
  for (const auto* t : {tp, tm, tv})
    RETNET_CHECK(t && t->dtype == "F32" && static_cast<size_t>(t->numel()) == n,
                 "'{}' holds tensors that do not match the model ({} parameters)", path, n);
  // Bytes, not floats: a buffer from elsewhere need not be aligned as the writer aligns a file.
  RETNET_CHECK(std::to_string(checksum(tp->data, tm->data, tv->data, n)) == meta.at("checksum"),
               "'{}' is damaged: checksum mismatch", path);
  if (n > 0) {
    std::memcpy(model.params().data(), tp->data, n * 4);
    std::memcpy(opt.first_moment().data(), tm->data, n * 4);
    std::memcpy(opt.second_moment().data(), tv->data, n * 4);
  }
  opt.set_steps_taken(info.step);
  return info;
}

}  // namespace

CheckpointInfo parse_checkpoint(const std::string& bytes, const std::string& label, Model& model,
                                AdamW& optimizer) {
  return restore_checkpoint(SafetensorsFile::from_bytes(bytes, label), model, optimizer,
                            std::nullopt);
}

std::optional<CheckpointInfo> load_latest_checkpoint(const std::string& dir, Model& model,
                                                     AdamW& opt) {
  remove_orphaned_temporaries(dir);
  const auto all = list_checkpoints(dir);
  for (const auto& [step, path] : all) {
    try {
      const CheckpointInfo info =
          restore_checkpoint(SafetensorsFile::open(path.string()), model, opt, step);
      if (step != all.front().first)
        std::fprintf(stderr, "warning: resuming from %s (step %lld), not from the newer %s\n",
                     path.string().c_str(), static_cast<long long>(step),
                     all.front().second.string().c_str());
      return info;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", path.string().c_str(), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace retnet
