#pragma once
// Model configuration, read from JSON with torchscale's RetNetConfig field names and meanings, so
// that one JSON file configures both torchscale and this engine. Missing fields take the defaults
// below (the small model the main job trains); fields of torchscale's that only matter to training
// in PyTorch (dropout, checkpointing, fsdp, ...) are accepted and ignored; features this engine
// does not implement (MoE, deepnorm, post-norm, multiway, ...) are rejected when switched on.
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/model/activation_kind.h"
#include "retnet/model/mixer.h"
#include "retnet/model/mixer_options.h"

namespace retnet {

enum class DecaySchedule { Torchscale, Paper };

// How queries and keys are rotated: torchscale pairs neighbours (x[2i], x[2i+1]) with
// theta_i = 10000^(-i / (d_k/2 - 1)); "half_split" (GPT-NeoX, LLaMA, flash-linear-attention) pairs
// x[i] with x[i + d_k/2] and uses theta_i = rope_theta^(-2i / d_k).
enum class RotaryStyle { Torchscale, HalfSplit };

// An elementwise map of retention's queries and keys before the rotation (fla's "feature_map", a
// transformers ACT2FN name): none, relu, relu^2, sigmoid, tanh, erf gelu, swish (alias silu).
// (Not linear attention's FeatureMap of mixers/feature_maps.h.)
enum class QkFeatureMap { None, Relu, Relu2, Sigmoid, Tanh, Gelu, Swish };
QkFeatureMap parse_qk_feature_map(const std::string& name);  // Error naming an unknown name
const char* qk_feature_map_name(QkFeatureMap f);

// Every setting of a model but its per-layer list: all that one layer's block reads. Kept apart so
// that Config::layer copies it without the list (no allocation while a decode step asks a hybrid
// model's layers for their widths).
struct ModelSettings {
  int64_t embed_dim = 256;        // decoder_embed_dim (d)
  int64_t value_embed_dim = 512;  // decoder_value_embed_dim
  int64_t heads = 4;              // decoder_retention_heads
  int64_t ffn_dim = 512;          // decoder_ffn_embed_dim
  int64_t layers = 4;             // decoder_layers
  int64_t vocab_size = 256;       // vocab_size (256: byte-level)
  double layernorm_eps = 1e-6;    // layernorm_eps, for every RMSNorm including the per-head one
  Activation activation = Activation::Gelu;  // activation_fn ("gelu" as torchscale, or "swish")
  bool no_scale_embedding = true;            // no_scale_embedding (false: embeddings times sqrt(d))
  int64_t recurrent_chunk_size = 64;  // recurrent_chunk_size: default chunk of the chunkwise form
  DecaySchedule decay = DecaySchedule::Torchscale;  // "decay": "torchscale" | "paper"
  const MixerSpec* mixer = &default_mixer();  // "mixer": the token mixer of every block
  // The options of `mixer` (null: its defaults), read from the fields its spec names (attention's
  // "attention": {...}, the Performer's "performer_features", AFT's "aft_max_distance").
  MixerOptionsPtr mixer_options;

  // Options of retention that flash-linear-attention's RetNet uses (defaults: torchscale's).
  int64_t key_embed_dim = 0;       // "key_embed_dim": width of q and k (0: decoder_embed_dim)
  RotaryStyle rotary = RotaryStyle::Torchscale;  // "rotary": "torchscale" | "half_split"
  double rope_theta = 10000.0;     // "rope_theta": the half-split rotation's base
  bool normalize_scores = true;    // "normalize_scores": torchscale's three normalisations
  bool head_norm_weight = false;   // "head_norm_weight": the head norm has a [d_v] weight
  bool output_gate = true;         // "output_gate": swish(g) gates the head norm's output
  // "kv_heads": heads of k and v (0: heads), each shared by heads / kv_heads query heads (fla's
  // num_kv_heads: query head h reads kv head h / (heads / kv_heads)).
  int64_t kv_heads = 0;
  QkFeatureMap feature_map = QkFeatureMap::None;  // "feature_map": applied to q and k
  // "share_decoder_input_output_embed" (torchscale's name; Hugging Face's tie_word_embeddings):
  // the LM head is the embedding matrix, one tensor used twice (its gradient sums both uses).
  bool tie_embeddings = false;
};

struct Config : ModelSettings {
  // "mixer" as a list: one entry per layer (a hybrid model; empty: `mixer` in every layer), a
  // name or {"mixer": "attention", <that layer's attention options>}. Use layer(l) or
  // layer_mixer(l); a hybrid model's `mixer` and `mixer_options` are its first layer's.
  struct LayerSpec {
    const MixerSpec* mixer = nullptr;
    MixerOptionsPtr options;  // the layer's mixer options (null: that mixer's defaults)
    bool operator==(const LayerSpec& o) const {
      return mixer == o.mixer && same_options(options, o.options);
    }
  };
  std::vector<LayerSpec> layer_specs;

  int64_t qk_width() const { return key_embed_dim > 0 ? key_embed_dim : embed_dim; }
  int64_t key_dim() const { return qk_width() / heads; }              // d_k
  int64_t head_value_dim() const { return value_embed_dim / heads; }  // d_v
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t kv_groups() const { return heads / kv_head_count(); }  // query heads per kv head
  int64_t k_width() const { return qk_width() / kv_groups(); }    // rows of k_proj
  int64_t v_width() const { return value_embed_dim / kv_groups(); }  // rows of v_proj
  double embed_scale() const;
  // gamma_h: 1 - 2^(-5-h) (torchscale), or the paper's 1 - exp(linspace(log 1/32, log 1/512, H)).
  double gamma(int64_t head) const;

  bool hybrid() const { return !layer_specs.empty(); }
  const MixerSpec& layer_mixer(int64_t l) const {
    return layer_specs.empty() ? *mixer : *layer_specs[static_cast<size_t>(l)].mixer;
  }
  // The config as layer l's block sees it: a single-mixer config with that layer's mixer and
  // options and, for an attention layer, its options applied (retention's options reset to neutral
  // for the other mixers of a hybrid model). Every per-layer width comes from it.
  Config layer(int64_t l) const;
  // Whether every layer has the form; whether some layer keeps its tokens (a cache).
  bool has_form(Form form) const;
  bool keeps_tokens() const;
  bool trains_with(Form form) const {
    return form == Form::Parallel || (form == Form::Chunkwise && has_form(form));
  }
  // The form sessions prefill with: chunkwise where every layer has it and none keeps tokens,
  // else parallel (a token cache prefills in one pass; the layers with a constant state then
  // continue it in their chunkwise form).
  Form prefill_form() const {
    return has_form(Form::Chunkwise) && !keeps_tokens() ? Form::Chunkwise : Form::Parallel;
  }
  // "retention" or "hybrid (retention x3, attention x1)".
  std::string mixer_description() const;
  // The largest per-layer widths (buffers shared by all layers).
  int64_t max_projection_width() const;
  int64_t max_value_dim() const;
  int64_t max_key_dim() const;

  // Throws Error naming the first inconsistency (dims not divisible by heads, odd d_k, ...).
  void validate() const;
  int64_t parameter_count() const;
  // Parameters of the embedding and the LM head: vocab x d once when tied, else twice.
  int64_t vocabulary_parameters() const { return (tie_embeddings ? 1 : 2) * vocab_size * embed_dim; }
  // Whether the mixer's output is gated by a projection g (its spec, and output_gate).
  // Of a single-mixer config (a hybrid model's: layer(l).gated()).
  bool gated() const { return mixer->gated && output_gate; }
  // Rows of a layer's input projection (q | k | v (| g); see MixerSpec). Of a single-mixer
  // config: a hybrid model's layers each have their own (layer(l).projection_width()).
  int64_t projection_width() const;
  // Constant-size recurrent state of one sequence, all layers (the mixer's spec per layer;
  // retention: per head a d_k x (d_v + 1) block, the state and the decayed key sum); 0 for the
  // mixers that keep every token.
  int64_t state_floats_per_sequence() const;
  // Cache floats one sequence adds per token, all layers (attention, aft: keys and values); 0 for
  // the mixers with a constant-size state.
  int64_t cache_floats_per_token() const;

  static Config from_json(const std::string& json_text, const std::string& origin = "config");
  static Config from_file(const std::string& path);
  // torchscale field names; round-trips through from_json.
  std::string to_json(int indent = -1) const;
};

}  // namespace retnet
