#pragma once
// Model files: safetensors with torchscale's tensor names. Our files carry the config and a format
// version in __metadata__; torchscale exports (RetNetDecoder.state_dict(), optionally with its
// retnet_rel_pos buffers, optionally prefixed "decoder." as fairseq does) load as they are, with
// their config given separately.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "retnet/model/model.h"

namespace retnet {

inline constexpr const char* kModelFormat = "retnet";
inline constexpr int kModelFormatVersion = 1;

struct LoadInfo {
  bool zero_copy = false;    // parameters point into the file mapping
  bool torchscale = false;   // no engine metadata: a torchscale export
  std::string source_dtype;  // dtype of the stored weights ("BF16", or "F32+BF16" when mixed)
  std::string flavour;       // a Hugging Face directory's layout ("fla", "syncdoth"), else empty
  std::vector<std::string> weight_files;  // the files the weights came from
  int64_t stored_bytes = 0;               // bytes of the stored weights
  int64_t bos_id = -1, eos_id = -1;       // a directory's config ids, else -1
  int64_t pad_id = -1;                    // the same
  double load_seconds = 0;                // open_seconds + prepare_seconds for inference
  // For inference: opening (mapping the files, validating headers) and preparing the weights
  // (reading, converting, packing; nothing for weights used in place).
  double open_seconds = 0, prepare_seconds = 0;
};

// Loads and validates a model: every tensor by name, dtype and shape, every value finite.
// `path` is a model file (.safetensors) or a Hugging Face directory (hf_directory.h).
// `config` overrides (or supplies) a file's config; without it the file's metadata must hold one.
Model load_model(const std::string& path, const std::optional<Config>& config = std::nullopt,
                 LoadInfo* info = nullptr);

// The model for inference only, in `precision`: the file or directory is opened (headers checked
// against the config, nothing read) and becomes the source of Model::prepare_inference's one pass,
// which reads each tensor straight into the prepared weights (never a whole float32 copy). Same
// logits and fingerprint as load_model then prepare_inference. A quantised file is used in its own
// type (f32 or that type; another is an Error naming `dtype`). With `in_place`, a directory's
// tensors stored in `precision`'s type are used where they lie in the mapped files (no read, no
// copy). load_seconds counts both steps.
Model load_model_for_inference(const std::string& path, const std::optional<Config>& config,
                               DecodePrecision precision, LoadInfo* info = nullptr,
                               bool in_place = true);

// Writes the model atomically, with the config and the format version in the metadata, plus
// `extra_metadata` (such as the tokenizer's entries, text/tokenizer.h).
void save_model(const Model& model, const std::string& path,
                const std::map<std::string, std::string>& extra_metadata = {});

}  // namespace retnet
