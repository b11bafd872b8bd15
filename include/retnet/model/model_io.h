#pragma once
// Model files: safetensors with torchscale's tensor names. Our files carry the config and a format
// version in __metadata__; torchscale exports (RetNetDecoder.state_dict(), optionally with its
// retnet_rel_pos buffers, optionally prefixed "decoder." as fairseq does) load as they are, with
// their config given separately.
#include <map>
#include <optional>
#include <string>

#include "retnet/model/model.h"

namespace retnet {

inline constexpr const char* kModelFormat = "retnet";
inline constexpr int kModelFormatVersion = 1;

struct LoadInfo {
  bool zero_copy = false;    // parameters point into the file mapping
  bool torchscale = false;   // no engine metadata: a torchscale export
  std::string source_dtype;  // dtype of the stored weights
};

// Loads and validates a model: every tensor by name, dtype and shape, every value finite.
// `config` overrides (or supplies) the config; without it the file's metadata must hold one.
Model load_model(const std::string& path, const std::optional<Config>& config = std::nullopt,
                 LoadInfo* info = nullptr);

// Writes the model atomically, with the config and the format version in the metadata, plus
// `extra_metadata` (such as the tokenizer's entries, text/tokenizer.h).
void save_model(const Model& model, const std::string& path,
                const std::map<std::string, std::string>& extra_metadata = {});

}  // namespace retnet
