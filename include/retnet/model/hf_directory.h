#pragma once
// Hugging Face model directories: config.json, model.safetensors or shards
// (model-0000k-of-0000n.safetensors with model.safetensors.index.json), generation_config.json and
// a tokenizer (tokenizer.json or tokenizer.model). Two layouts of RetNet are read and written:
//   fla:      flash-linear-attention's RetNet (model_type "retnet", hidden_size, names
//             model.layers.N.attn.q_proj.weight, ...): half-split rotation, plain retention, a
//             gated head norm with a weight, SwiGLU; expressed with the Config's retention options.
//   syncdoth: syncdoth/RetNet (torchscale's config keys and names under "model.", lm_head).
// A setting the engine does not implement is an Error naming the key and its value; keys that
// concern training or other runtimes only are accepted.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "retnet/model/config.h"
#include "retnet/model/model.h"

namespace retnet {

class Model;

enum class HfFlavour { Fla, Syncdoth };
const char* hf_flavour_name(HfFlavour f);

// What config.json (and generation_config.json) say, translated.
struct HfModelConfig {
  HfFlavour flavour = HfFlavour::Fla;
  Config config;
  bool tied_embeddings = false;  // the file has no lm_head: the head is the embedding
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;
};

// Translates a config.json's text (`origin` names the file in errors); the flavour comes from its
// keys (hidden_size: fla; decoder_embed_dim: syncdoth).
HfModelConfig parse_hf_config(const std::string& json_text, const std::string& origin);
// Whether a config JSON is a Hugging Face config.json (fla's hidden_size, or a model_type) rather
// than the engine's own torchscale-named config.
bool is_hf_config(const std::string& json_text);
// The config.json of a model in a flavour; throws Error naming the option the flavour cannot
// express.
std::string hf_config_json(const Config& config, HfFlavour flavour, int64_t bos_id = -1,
                           int64_t eos_id = -1, int64_t pad_id = -1);

// The flavour's name of one of the engine's tensors ("layers.3.retention.q_proj.weight" ->
// "model.layers.3.attn.q_proj.weight").
std::string hf_tensor_name(const std::string& engine_name, HfFlavour flavour);
// Every name a file of the flavour may give that tensor, hf_tensor_name's first (fla writes the
// head norm as g_norm without the fused gate: fuse_norm false, or no output gate).
std::vector<std::string> hf_tensor_names_accepted(const std::string& engine_name, HfFlavour flavour);

// Whether `path` is a directory holding a config.json.
bool is_hf_directory(const std::string& path);

struct HfLoadInfo {
  HfModelConfig hf;
  std::vector<std::string> weight_files;  // the shards, in order
  std::map<std::string, int64_t> stored_dtypes;  // dtype -> tensors stored in it
  int64_t stored_bytes = 0;
  // For inference: mapping and validating the shards, then reading/converting/packing weights.
  double open_seconds = 0, prepare_seconds = 0;
};

// Loads a directory: every tensor by name, dtype and shape (F32, F16, BF16; converted to float32),
// every value finite. Errors name the file and the tensor or key.
Model load_hf_directory(const std::string& dir, HfLoadInfo* info = nullptr);

// Loads a directory for inference only: the directory is the source (WeightSource) of
// Model::prepare_inference's one pass, so its tensors are read, converted and packed in
// `precision` one at a time, never a whole float32 copy: the resident set stays near the packed
// weights' bytes during and after loading. Same weights and fingerprint as load_hf_directory then
// prepare_inference. With `in_place`, the tensors stored in `precision`'s type (a BF16 directory
// for bf16, F32 for f32, F16 for f16) are not read at all: the model multiplies by them where they
// lie in the mapped shards, so it opens in milliseconds and its pages come in as decoding touches
// them; their values are scanned for non-finite numbers on first use. A shard replaced or
// truncated on disk while a model maps it is undefined behaviour (as for any mapped file).
Model load_hf_directory_for_inference(const std::string& dir, DecodePrecision precision,
                                      HfLoadInfo* info = nullptr, bool in_place = true);

// Writes `model` as a directory in a flavour (config.json, model.safetensors in F32 or BF16 with
// the flavour's names, generation_config.json: an object with the ids given, -1 for none),
// atomically per file; `tokenizer_files` (name -> bytes, see hf_tokenizer_files) are written
// beside them. Throws Error naming the option the flavour cannot express.
void save_hf_directory(const Model& model, const std::string& dir, HfFlavour flavour,
                       const std::string& dtype, const std::map<std::string, std::string>& tokenizer_files,
                       int64_t bos_id = -1, int64_t eos_id = -1, int64_t pad_id = -1);

}  // namespace retnet
