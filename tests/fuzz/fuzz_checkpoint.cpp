// Training checkpoints (`train --resume`): the input replaces the newest checkpoint file of a run
// directory that also holds a valid older one, and loading must either restore one of them or
// refuse with an Error.
#include <filesystem>

#include "fuzz_common.h"
#include "retnet/train/checkpoint.h"
#include "retnet/train/optimizer.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace retnet;
  if (!fuzz::seed_dir()) return 0;
  Model model = Model::init(fuzz::tiny_config(), 1);
  AdamW optimizer(model.params().layout(), AdamWOptions{});
  const fs::path dir = fuzz::work_dir() / "seed_checkpoints";
  CheckpointInfo info;
  info.step = 3;
  info.total_steps = 10;
  info.run_json = R"({"batch": 4})";
  save_checkpoint(dir.string(), model, optimizer, info, 1);
  fuzz::write_seed("step3.safetensors", fuzz::read_all(list_checkpoint_files(dir.string()).front()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  static Model model = Model::init(fuzz::tiny_config(), 1);
  static AdamW optimizer(model.params().layout(), AdamWOptions{});
  static const fs::path dir = [] {
    const fs::path d = fuzz::work_dir() / "checkpoints";
    CheckpointInfo info;
    info.step = 1;
    info.total_steps = 10;
    save_checkpoint(d.string(), model, optimizer, info, 3);
    info.step = 2;
    save_checkpoint(d.string(), model, optimizer, info, 3);
    return d;
  }();
  const std::string newest = list_checkpoint_files(dir.string()).front();
  fuzz::write_file(fs::relative(newest, fuzz::work_dir()).string(), fuzz::as_text(data, size));
  fuzz::rejecting_errors([&] { load_latest_checkpoint(dir.string(), model, optimizer); });
  return 0;
}
