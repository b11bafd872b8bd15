#pragma once
// The RetNet language model (torchscale's RetNetDecoder): its config and its parameters in one
// buffer under torchscale's state_dict names. Forward passes are in forward.h, files in model_io.h.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "retnet/core/param_buffer.h"
#include "retnet/model/config.h"

namespace retnet {

inline constexpr size_t kNoTensor = static_cast<size_t>(-1);

// Indices into the layout of one decoder layer's tensors. The layout keeps the mixer's input
// projections adjacent (q, k, v and retention's g: one [projection_width, d] matrix, one GEMM)
// and fc1, gate adjacent (one [2 ffn, d] matrix), in the order torchscale names them otherwise.
// Names: "layers.N.<scope>.q_proj.weight", scope = "retention" (torchscale's) or the mixer's name.
struct LayerTensors {
  size_t q_proj, k_proj, v_proj, g_proj = kNoTensor, out_proj, mixer_norm, fc1, gate, fc2,
                                 final_norm;
  // The mixer's own tensors, in the order of its spec's `tensors` (the block names each index:
  // e.g. the Performer's feature matrix, AFT's position biases, RWKV's time_decay, time_first).
  std::vector<size_t> mixer_tensors;
};

struct ModelTensors {
  size_t embed, output_projection, final_norm;
  std::vector<LayerTensors> layers;
};

// The layout of a config, with torchscale's names.
ParamLayout make_param_layout(const Config& config, ModelTensors* indices = nullptr);

enum class DecodePrecision { F32, F16 };

// One projection (possibly several adjacent tensors used as one matrix [N, K]) packed for decoding.
struct PackedProjection {
  int64_t N = 0, K = 0;
  const float* f32 = nullptr;     // set for DecodePrecision::F32
  const uint16_t* f16 = nullptr;  // set for DecodePrecision::F16
};
struct DecodePack;

class Model {
 public:
  Model(const Config& config, ParamBuffer params);

  // torchscale's initialisation, drawn from a counter-based RNG: the same seed gives the same model
  // whatever the thread count.
  static Model init(const Config& config, uint64_t seed);

  const Config& config() const { return config_; }
  const ParamBuffer& params() const { return params_; }
  ParamBuffer& params() { return params_; }
  const ModelTensors& tensors() const { return tensors_; }
  const float* param(size_t index) const { return params_.tensor(index); }
  // Decay per head, [H].
  const std::vector<double>& gammas() const { return gammas_; }
  // Rotation frequencies theta_i, [d_k / 2] (of the model's retention layers).
  const std::vector<double>& thetas() const { return thetas_; }
  // Per layer (a hybrid model's layers differ): the config its block sees (Config::layer), its
  // rotation frequencies, where its constant state starts in a sequence's state (floats), and its
  // index among the layers that keep a token cache (-1: none).
  const Config& layer_config(int64_t l) const { return layer_configs_[static_cast<size_t>(l)]; }
  const std::vector<double>& layer_thetas(int64_t l) const {
    return *layer_thetas_[static_cast<size_t>(l)];
  }
  int64_t state_offset(int64_t l) const { return state_offsets_[static_cast<size_t>(l)]; }
  int64_t cache_slot(int64_t l) const { return cache_slots_[static_cast<size_t>(l)]; }

  int64_t parameter_count() const { return static_cast<int64_t>(params_.size()); }

  // Decoding streams every weight matrix once per token, so at batch 1 it runs at the speed the
  // weights come from memory, and at batch B its products have B rows. prepare_decode packs the
  // projection matrices for products of few rows (panels of 16 outputs: GEMM-speed at every batch
  // size, batch-invariant); F16 packs them in half precision (half the bytes per token, float32
  // accumulation; logits within ~1e-3 of the exact ones). Without it those products use
  // skinny_gemm_nt on the float32 weights.
  void prepare_decode(DecodePrecision precision);
  bool decode_prepared() const { return packed_ != nullptr; }
  DecodePrecision decode_precision() const;
  // The packed form of the projection starting at tensor `index`, or nullptr.
  const PackedProjection* packed(size_t index) const;
  int64_t state_bytes_per_sequence() const {
    return config_.state_floats_per_sequence() * static_cast<int64_t>(sizeof(float));
  }

 private:
  Config config_;
  ParamBuffer params_;
  ModelTensors tensors_;
  std::vector<double> gammas_, thetas_;
  std::vector<Config> layer_configs_;
  std::vector<std::shared_ptr<const std::vector<double>>> layer_thetas_;
  std::vector<int64_t> state_offsets_, cache_slots_;
  std::shared_ptr<const DecodePack> packed_;
};

// A 64-bit fingerprint of the config and every parameter value: state files record it so that a
// state is never resumed on another model.
uint64_t model_fingerprint(const Model& model);

}  // namespace retnet
