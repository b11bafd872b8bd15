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
// damaged or holds another step than its name says, with a warning on stderr naming both);
// nullopt when there is none. Restores parameters and moments. Temporary files left by a killed
// writer are removed first (and at each save), with a line on stderr.
std::optional<CheckpointInfo> load_latest_checkpoint(const std::string& dir, Model& model,
                                                     AdamW& optimizer);

// Restores a checkpoint from its file's bytes (fuzzing, tests): every check of a load from disk
// but the step named by the file name; `label` names it in errors.
CheckpointInfo parse_checkpoint(const std::string& bytes, const std::string& label, Model& model,
                                AdamW& optimizer);

}  // namespace retnet
