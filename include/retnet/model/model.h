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

// Indices into the layout of one decoder layer's tensors. The layout keeps q, k, v, g adjacent
// (one [2d + 2 vd, d] matrix: the four projections are one GEMM) and fc1, gate adjacent (one
// [2 ffn, d] matrix), in the order torchscale names them otherwise.
struct LayerTensors {
  size_t q_proj, k_proj, v_proj, g_proj, out_proj, retention_norm, fc1, gate, fc2, final_norm;
};

struct ModelTensors {
  size_t embed, output_projection, final_norm;
  std::vector<LayerTensors> layers;
};

// The layout of a config, with torchscale's names.
ParamLayout make_param_layout(const Config& config, ModelTensors* indices = nullptr);

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
  // Rotation frequencies theta_i, [d_k / 2].
  const std::vector<double>& thetas() const { return thetas_; }

  int64_t parameter_count() const { return static_cast<int64_t>(params_.size()); }

  // Decoding streams every weight matrix once per token, so at batch 1 it runs at the speed the
  // weights come from memory. With f16 on, products of few rows (decode steps, short prefills)
  // read a half-precision copy of the weights (same layout, half the bytes; accumulation stays
  // float32): faster, and no longer bit-exact to the float32 forms (logits within ~1e-3).
  void set_f16_decode(bool on);
  bool f16_decode() const { return f16_ != nullptr; }
  // The f16 copy of tensor `index`, or nullptr when f16 decoding is off.
  const uint16_t* param_f16(size_t index) const {
    return f16_ ? f16_->data() + params_.layout()[index].offset : nullptr;
  }
  int64_t state_bytes_per_sequence() const {
    return config_.state_floats_per_sequence() * static_cast<int64_t>(sizeof(float));
  }

 private:
  Config config_;
  ParamBuffer params_;
  ModelTensors tensors_;
  std::vector<double> gammas_, thetas_;
  std::shared_ptr<const std::vector<uint16_t>> f16_;
};

// A 64-bit fingerprint of the config and every parameter value: state files record it so that a
// state is never resumed on another model.
uint64_t model_fingerprint(const Model& model);

}  // namespace retnet
