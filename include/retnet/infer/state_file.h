#pragma once
// State files: one decoding sequence saved so that generation continues later exactly where it
// stopped. Layout: "RETNETST", u32 format version, u32 header length, a JSON header (model
// fingerprint and config, sizes, position), the payload (state floats, logits, recent tokens,
// pending text bytes), and a u64 FNV-1a checksum of everything before it. Written atomically.
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/model/model.h"

namespace retnet {

inline constexpr int kStateFileVersion = 1;

struct SavedSequence {
  int64_t position = 0;         // tokens consumed
  std::vector<float> state;     // the model's state_floats_per_sequence()
  std::vector<float> cache;     // mixers with a cache: per layer, `position` rows of keys, values
  std::vector<float> logits;    // [vocab] after the last token; empty if none consumed
  std::vector<int32_t> recent;  // latest tokens (repetition penalty)
  std::string text_tail;        // bytes the generator had not emitted yet
};

void write_state_file(const std::string& path, const Model& model, uint64_t fingerprint,
                      const SavedSequence& sequence);
// How a state file stores the state and the token cache: float32 (exact), or bfloat16 (half the
// bytes, each value rounded to 8 significant bits; the header's "state_dtype" says so). Logits
// stay float32 either way.
enum class StateDtype { F32, BF16 };
// The bytes write_state_file writes (the server's prompt cache embeds them in its files).
std::string state_file_bytes(const Model& model, uint64_t fingerprint,
                             const SavedSequence& sequence, StateDtype dtype = StateDtype::F32);
// Reads and checks a state file against `model`: damage, truncation, another format version or
// another model are Errors that say which. A bfloat16 file's values come back widened to float.
SavedSequence read_state_file(const std::string& path, const Model& model, uint64_t fingerprint);
// The same checks over a state file's bytes (fuzzing, tests); `path` names it in errors.
SavedSequence parse_state_file(const std::string& bytes, const std::string& path,
                               const Model& model, uint64_t fingerprint);

}  // namespace retnet
