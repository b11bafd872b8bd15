#pragma once
// Training checkpoints: parameters, AdamW moments, the step and the run's settings, in one
// safetensors file written atomically (temporary file, fsync, rename), with a checksum of the data
// so that a file cut short or damaged is detected on load. The last K are kept.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "retnet/model/model.h"
#include "retnet/train/optimizer.h"

namespace retnet {

struct CheckpointInfo {
  int64_t step = 0;         // optimizer steps completed
  int64_t total_steps = 0;  // the schedule's length
  uint64_t seed = 0;
  std::string run_json;     // the run's settings, for checking a resume
};

// `extra_metadata` joins the file's metadata (the tokenizer's entries, so that a checkpoint can be
// evaluated or sampled like a model file).
void save_checkpoint(const std::string& dir, const Model& model, AdamW& optimizer,
                     const CheckpointInfo& info, int keep_last,
                     const std::map<std::string, std::string>& extra_metadata = {});

// The checkpoint files in dir, newest first (none when dir does not exist).
std::vector<std::string> list_checkpoint_files(const std::string& dir);

// The newest checkpoint in dir that loads and verifies (older ones are tried when the newest is
// damaged, with a warning on stderr); nullopt when there is none. Restores parameters and moments.
std::optional<CheckpointInfo> load_latest_checkpoint(const std::string& dir, Model& model,
                                                     AdamW& optimizer);

}  // namespace retnet
