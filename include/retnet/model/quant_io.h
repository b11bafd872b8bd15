#pragma once
// Model files with quantised projections (`retnet quantize`): our safetensors model file in which
// each projection tensor [N, K] is stored as dtype U8, shape [N, K / 32 * block bytes], holding
// ggml's blocks (retnet/core/quant.h), with the type in the metadata: "quantization" = "q8_0" |
// "q4_0" | "q4_1" for the file and "quant.<tensor name>" = the type for each quantised tensor.
// Everything else (embedding, norms, decays, a head kept in f32) is F32. See docs/quantization.md.
#include <map>
#include <string>

#include "retnet/core/quant_type.h"
#include "retnet/model/model.h"

namespace retnet {

inline constexpr const char* kQuantizationKey = "quantization";
inline constexpr const char* kQuantTensorPrefix = "quant.";

// Writes `model` (float32 weights, complete) with its projections quantised to `type`, and the
// LM head too unless keep_head_f32. Atomic like save_model.
void save_quantized_model(const Model& model, const std::string& path, QuantType type,
                          bool keep_head_f32,
                          const std::map<std::string, std::string>& extra_metadata = {});

// Model::prepare_inference for a model loaded whole: one loaded from a quantised file is already
// prepared in its type, so f32 (every command's default) or that type leave it as it is; another
// type is an Error naming `option`.
void prepare_loaded_for_inference(Model& model, DecodePrecision precision,
                                  const std::string& option);

class SafetensorsFile;
struct LoadInfo;
// Loads a file written by save_quantized_model (model_io's load_model calls it when the metadata
// names a quantization): the file is the source of Model::prepare_inference's pass (the stored
// blocks copied, the other tensors read as float32), so the model comes back prepared for
// inference in that type, its float32 projections absent. Bad tensors (wrong dtype, a size that does not match the shape and the type,
// non-finite scales) are Errors naming the file and the tensor.
Model load_quantized_file(const SafetensorsFile& file, const Config& config, LoadInfo& info);

}  // namespace retnet
