#pragma once
// Internal (src/include): the compute backend behind the inference layer loop
// (src/model/layer_forward.cpp). Every operation a forward pass runs goes through one Backend
// chosen at load (Model::use_backend): the projections (matmul against a stored weight, and the LM
// head's logits), the embedding rows, the norms, the gated activations, the rotation table and
// each mixer's forms and decode step. One folder per backend: src/backend/cpu/ (the engine's own
// kernels) and src/backend/reference/ (plain scalar code, to check the others against).
// Training's forward and backward run on the CPU kernels whatever the model's backend.
// docs/backends.md describes what another backend (CUDA) implements behind this interface.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/model/activation_kind.h"

namespace retnet {
class Model;
}

namespace retnet::detail {

class LayerMixer;
struct MixerPass;

class Backend {
 public:
  virtual ~Backend() = default;
  // The name --backend and retnet.load(backend=) take.
  virtual const char* name() const = 0;

  // y[M, N] = x[M, K] W^T (+ y when accumulate) for the model's weight tensor `w` [N, K], in
  // whatever type and placement the model stores it (rows of adjacent tensors may follow: q, k,
  // v, g are one product).
  virtual void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K,
                       const float* x, int64_t ldx, bool accumulate, float* y,
                       int64_t ldy) const = 0;
  // x[N, d] = embed_scale * the embedding rows of tokens[N] (ids already checked).
  virtual void embed(const Model& model, const int32_t* tokens, int64_t N, float* x) const = 0;
  // y[N, D] = x / rms(x) * w (w null: 1), rstd[N] the inverse rms if not null.
  virtual void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                       float* rstd, int64_t N, int64_t D, float eps) const = 0;
  // out[n, i] = act(a[n, i]) * b[n, i]; out may alias a or b.
  virtual void gated_activation(Activation act, const float* a, int64_t lda, const float* b,
                                int64_t ldb, float* out, int64_t ldo, int64_t N,
                                int64_t D) const = 0;
  // The cos | sin table of a pass's positions (ops/rotation.h's rotation_table); returns the
  // sequences' row stride (0: one table shared by all).
  virtual int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                                 const int64_t* positions, float* table) const = 0;
  // One layer's mixer over the pass (its form, state and cache as MixerPass says); returns where
  // the output [N, vd] is. `arena` holds the mixer's own workspace_floats for the pass.
  virtual const float* mixer_forward(const LayerMixer& mixer, const MixerPass& pass,
                                     Arena& arena) const = 0;
};

// The engine's kernels (the default) and the scalar reference.
const Backend& cpu_backend();
const Backend& reference_backend();
// The backend named `name`; an Error naming the choices otherwise.
const Backend& find_backend(const std::string& name);

}  // namespace retnet::detail
