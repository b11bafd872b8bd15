// Hugging Face directories: the input is either config.json (first byte even) or the shard index
// model.safetensors.index.json (odd) of a directory whose other files are those of a tiny valid
// syncdoth export, so that the fuzzer explores each file against real neighbours.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/hf_directory.h"

namespace fs = std::filesystem;

namespace {

// A valid export of the tiny model, made once; its files are copied into a fresh directory.
const fs::path& template_dir() {
  static const fs::path dir = [] {
    const fs::path d = retnet::fuzz::work_dir() / "hf_template";
    // syncdoth's layout holds torchscale's RetNet as it is.
    retnet::save_hf_directory(retnet::fuzz::tiny_model(), d.string(), retnet::HfFlavour::Syncdoth,
                              "f32", {});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace retnet;
  if (!fuzz::seed_dir()) return 0;
  // "\x00" + config.json, and "\x01" + a shard index naming every tensor of the one shard.
  fuzz::write_seed("config", "\x00" + fuzz::read_all((template_dir() / "config.json").string()));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  const auto shard = SafetensorsFile::open((template_dir() / "model.safetensors").string());
  for (const auto& t : shard.tensors())
    index["weight_map"][t.name] = "model-00001-of-00001.safetensors";
  fuzz::write_seed("index", "\x01" + index.dump(2));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  if (size == 0) return 0;
  const fs::path dir = fuzz::work_dir() / "hf";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const bool index = data[0] & 1;
  for (const auto& e : fs::directory_iterator(template_dir())) {
    const std::string name = e.path().filename().string();
    if (index && name == "model.safetensors")  // the index names this file as its one shard
      fs::copy_file(e.path(), dir / "model-00001-of-00001.safetensors");
    else if (!(!index && name == "config.json"))
      fs::copy_file(e.path(), dir / name);
  }
  const std::string text(fuzz::as_text(data + 1, size - 1));
  fuzz::write_file(index ? "hf/model.safetensors.index.json" : "hf/config.json", text);
  fuzz::rejecting_errors([&] { load_hf_directory(dir.string()); });
  return 0;
}
