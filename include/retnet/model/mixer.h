#pragma once
// The token mixers a model's blocks can use (the config's "mixer" field), and what each one
// needs from the rest of the engine: its projections, the forms it runs, the state or cache it
// carries between calls. Everything else in a block (norms, FFN, residuals) is the same for all.
//
//   mixer        projections (rows of the input product)  core                     decoding carries
//   retention    q d | k d | v vd | g vd                  multi-scale retention,   H x dk x (dv+1)
//                                                         head norm, swish gate
//   attention    q d | k d | v vd                         causal softmax, rotary   KV cache (grows)
//   linear       q d | k d | v vd                         elu+1 linear attention   H x dk x (dv+1)
//   performer    q d | k d | v vd                         FAVOR+ linear attention  H x m x (dv+1)
//   aft          q vd | k vd | v vd                       AFT-full, position bias  K, V cache
//   (grows) aft-simple   q vd | k vd | v vd                       AFT-simple               3 x vd
//   rwkv         q vd | k vd | v vd                       decay attention          3 x vd
// Every mixer ends with the output projection out_proj [d, vd].
#include <cstdint>
#include <string>

#include "retnet/core/form.h"

namespace retnet {

enum class MixerKind { Retention, Attention, Linear, Performer, Aft, AftSimple, Rwkv };

const char* mixer_name(MixerKind kind);
MixerKind parse_mixer(const std::string& name);  // throws Error listing the valid names
// "retention, attention, linear, performer, aft, aft-simple, rwkv"
const char* mixer_names();

// Whether q and k are per channel (width vd) rather than per head (width d): aft, aft-simple, rwkv.
bool mixer_is_channelwise(MixerKind kind);

// Whether the mixer rotates its queries and keys by position (xPos/rotary): retention, attention.
bool mixer_uses_rotation(MixerKind kind);

// The forms a forward pass can run (Form's values): which ones a mixer has.
//   parallel: every mixer (training, and prefill for the mixers with a cache);
//   recurrent: every mixer (decoding, one token at a time);
//   chunkwise: the mixers with a constant-size state (all but attention and aft);
//   scan: retention only.
bool mixer_has_form(MixerKind kind, Form form);
// Whether the mixer keeps every earlier token (a cache that grows with the sequence) rather than
// a constant-size state: attention and aft. Their parallel form can continue a cache (prefill).
bool mixer_has_cache(MixerKind kind);
// The form sessions prefill prompts with: chunkwise where the mixer has it, else parallel.
Form mixer_prefill_form(MixerKind kind);
// The forms training can run: parallel, and chunkwise where the mixer has it.
bool mixer_trains_with(MixerKind kind, Form form);

}  // namespace retnet
