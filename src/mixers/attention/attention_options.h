#pragma once
// The settings of a model's softmax-attention layers (the "attention" mixer, alone or in a hybrid
// model: fla's "attn" block) where they differ from the model's; 0 keeps the model's value. In a
// config: "attention": {...}, and a hybrid list entry {"mixer": "attention", ...} of its own.
#include <cstdint>

#include "retnet/model/mixer_options.h"

namespace retnet::detail {

struct AttentionOptions : MixerOptionsOf<AttentionOptions> {
  int64_t heads = 0;      // "heads": query heads (0: decoder_retention_heads)
  int64_t kv_heads = 0;   // "kv_heads": key/value heads, shared by groups of query heads (0: heads)
  int64_t value_dim = 0;  // "value_dim": width of v and of the output (0: decoder_value_embed_dim)
  double rope_theta = 0;  // "rope_theta": the half-split rotation's base (0: the model's)
  bool qkv_bias = false;  // "qkv_bias": q, k and v have biases
  int64_t window_size = 0;  // "window_size": a token sees the last window_size tokens (0: all)
  bool operator==(const AttentionOptions&) const = default;
};

struct MixerOptionsCodec;
const MixerOptionsCodec& attention_options_codec();

}  // namespace retnet::detail
