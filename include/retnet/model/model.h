#pragma once
// The RetNet language model (torchscale's RetNetDecoder): its config and its parameters in one
// buffer under torchscale's state_dict names. Forward passes are in forward.h, files in model_io.h.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "retnet/core/param_buffer.h"
#include "retnet/core/quant_type.h"
#include "retnet/model/config.h"
#include "retnet/model/weight.h"

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

// The element type of the projection matrices used for inference (`--dtype`): F32 exact, F16 and
// BF16 half the bytes with float32 accumulation. Norms, embeddings, states stay float32.
// Q8_0, Q4_0, Q4_1: ggml's blocks of 32 (retnet/core/quant.h), 8.5, 4.5 and 5 bits per weight;
// the embedding and the other tensors stay float32.
enum class DecodePrecision { F32, F16, BF16, Q8_0, Q4_0, Q4_1 };
// "f32" | "bf16" | "f16" | "q8_0" | "q4_0" | "q4_1" (what --dtype takes); anything else is an
// Error naming `option`.
DecodePrecision parse_decode_precision(const std::string& name, const std::string& option);
const char* decode_precision_name(DecodePrecision precision);
// Whole bytes per weight (1 for the quantised types: see decode_precision_bits).
int64_t decode_precision_bytes(DecodePrecision precision);
double decode_precision_bits(DecodePrecision precision);
// The block type of a quantised precision, nullopt for F32/F16/BF16.
std::optional<QuantType> decode_quant_type(DecodePrecision precision);

DecodePrecision decode_precision_of(QuantType type);
// The element type a precision's weights are stored in (weight.h).
ElementType decode_element_type(DecodePrecision precision);

// Bytes of quantised blocks held elsewhere (a mapped file).
struct QuantBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Where prepare_inference takes a model's weights from: what a loader opened (a model file, a
// torchscale export, a quantised file, a Hugging Face directory's mapped shards), or nothing (the
// default): the model's own float32 buffer holds them (a model initialised, trained or loaded
// whole).
struct WeightSource {
  // Writes tensor `index` of the layout's float32 values into `out` (read, converted, checked
  // finite). With `release`, the stored pages are handed back once read (the tensor is not used
  // where it lies). Empty: the buffer holds the values.
  std::function<void(size_t index, float* out, bool release)> read;
  // Where tensor `index` is stored row-major in element type `type`, ready to be used where it
  // lies (a mapped file), or nullptr. Optional.
  std::function<const void*(size_t index, ElementType type)> stored_as;
  // Tensors stored quantised (a file written by `retnet quantize`): their blocks by tensor index,
  // copied as they are (`read` is never asked for them). With `release_quantised`, their pages
  // (of a read-only mapped file) are handed back once copied.
  std::map<size_t, QuantBytes> quantised;
  bool release_quantised = false;
  // What `read` and the tensors used in place read from (the mappings): held for as long as the
  // model or a copy of it lives. With it, the fingerprint waits for its first use and then calls
  // `read` again for every tensor, so `read` must own what it reads.
  std::shared_ptr<const void> keep_alive;
  // Where each layout tensor is stored ("tensor 'lm_head.weight' of 'dir/model.safetensors'"),
  // named beside the engine's name in errors about a tensor used in place. Optional.
  std::vector<std::string> origins;
};

// What prepare_inference builds: every projection (and the embedding) in `precision`, from
// `source`. Implicit from a precision: model.prepare_inference(DecodePrecision::BF16).
struct LoadPlan {
  LoadPlan(DecodePrecision precision = DecodePrecision::F32) : precision(precision) {}
  DecodePrecision precision;
  // The quantised precisions: the LM head stays float32 (panels), the rest is quantised.
  bool keep_head_f32 = false;
  // Keep the float32 originals (training and saving still work beside the packed copy): what
  // prepare_decode does. Only with the buffer as the source.
  bool keep_float32 = false;
  // Tensors stored in the precision's type are used where they lie (source.stored_as), not read.
  bool in_place = true;
  WeightSource source;
};

struct WeightStore;
namespace detail {
class Backend;
}

class Model {
 public:
  Model(const Config& config, ParamBuffer params);

  // torchscale's initialisation, drawn from a counter-based RNG: the same seed gives the same model
  // whatever the thread count.
  static Model init(const Config& config, uint64_t seed);

  const Config& config() const { return config_; }
  // The float32 buffer. Its layout is always valid; its values only while weights_complete()
  // (the mutable accessor, for training and loading, checks that).
  const ParamBuffer& params() const { return params_; }
  ParamBuffer& params() {
    require_complete_weights("changing the parameters (training, fine-tuning, loading)");
    return params_;
  }
  const ModelTensors& tensors() const { return tensors_; }
  // A tensor's float32 values; an Error for a projection released by prepare_inference.
  const float* param(size_t index) const;
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
  // weights come from memory, and at batch B its products have B rows. Preparing packs the
  // projection matrices for products of few rows (panels of 16 outputs: GEMM-speed at every batch
  // size, batch-invariant); F16 packs them in half precision (half the bytes per token, float32
  // accumulation; logits within ~1e-3 of the exact ones). Without it those products use
  // skinny_gemm_nt on the float32 weights.
  //
  // The one way a model's weights are prepared, from any source (LoadPlan, WeightSource): one
  // pass over the layout that reads each tensor (or takes its stored blocks, or uses it where it
  // lies) and builds each product's weight as soon as its tensors are in. For inference only
  // (unless plan.keep_float32): the prepared copy REPLACES the float32 originals of the
  // projections (their pages are returned to the system as each is packed), so the model holds
  // one copy of its weights, in the plan's precision; prefill and decode both use it. Training,
  // saving and exporting need the originals: they fail with an Error afterwards. When the
  // buffer's storage is shared with another Model (a copy), nothing is released (the copy would
  // lose its weights). A loader's source fills a buffer of zeros (untouched: no memory) tensor by
  // tensor, so loading never holds a whole float32 copy: the resident set peaks at the prepared
  // weights plus one projection in float32. Weights used in place are not scanned for non-finite
  // numbers here (the logits are, on first use). Same weights and fingerprint whatever the source.
  void prepare_inference(const LoadPlan& plan);
  // prepare_inference keeping the float32 originals (plan.keep_float32).
  void prepare_decode(DecodePrecision precision);
  // Bytes of the weights used in place (0 unless prepared from a source with stored_as).
  int64_t in_place_bytes() const;
  // Whether model_fingerprint reads every weight on its first call (a mapped file kept).
  bool fingerprint_deferred() const;
  // Whether every float32 parameter is still present (false after prepare_inference released some).
  bool weights_complete() const;
  // Throws an Error saying `what` needs the float32 weights if some were released.
  void require_complete_weights(const std::string& what) const;
  // The tensors the projection products read (each layer's q, k, v, g, out, fc1, gate, fc2 and
  // the LM head: what the quantised precisions quantise), by index, with their row length K.
  std::vector<std::pair<size_t, int64_t>> projection_tensors() const;
  // Whether the LM head is kept float32 in a quantised model.
  bool head_kept_f32() const;
  // Bytes of the packed projections (0 before prepare_decode).
  int64_t packed_bytes() const;
  bool decode_prepared() const { return prepared_ != nullptr; }
  DecodePrecision decode_precision() const;
  // The weight a product or lookup reads for the projection starting at tensor `index` (each
  // layer's q, out, fc1, fc2, the LM head) or the embedding: the prepared copy (panels, rows used
  // in place, a half-precision embedding) when there is one, else the float32 rows of the buffer.
  // An Error naming the tensor for another index.
  const Weight& weight(size_t index) const;
  int64_t state_bytes_per_sequence() const {
    return config_.state_floats_per_sequence() * static_cast<int64_t>(sizeof(float));
  }
  // The backend inference passes run on (backend_names()): "cpu", the engine's kernels (the
  // default), or "reference", plain scalar code to check them against. Training runs on the CPU
  // kernels whatever is chosen. Throws Error naming the choices for another name.
  void use_backend(const std::string& name);
  const detail::Backend& backend() const;

 private:
  const detail::Backend* backend_ = nullptr;  // nullptr: the CPU backend
  Config config_;
  ParamBuffer params_;
  ModelTensors tensors_;
  std::vector<double> gammas_, thetas_;
  std::vector<Config> layer_configs_;
  std::vector<std::shared_ptr<const std::vector<double>>> layer_thetas_;
  std::vector<int64_t> state_offsets_, cache_slots_;
  // The prepared weights (packed, quantised, used in place), with what preparing left behind:
  // which float32 tensors were released and the fingerprint taken before. Shared by copies.
  std::shared_ptr<const WeightStore> prepared_;
  // The float32 rows of every weight() index, read where the buffer holds them.
  std::shared_ptr<const WeightStore> plain_;
  bool released(size_t index) const;
  [[noreturn]] void throw_released(size_t index) const;
  friend class WeightPacker;
  friend uint64_t model_fingerprint(const Model& model);
};

// A 64-bit fingerprint of the config and every parameter value: state files record it so that a
// state is never resumed on another model.
uint64_t model_fingerprint(const Model& model);

// The backends Model::use_backend takes, in order: "cpu", "reference".
std::vector<std::string> backend_names();

}  // namespace retnet
