#pragma once
// Forward passes of the language model in any form its mixer has, continuing the sequences'
// state (state.h) where the form carries one.
#include <cstdint>

#include "retnet/core/arena.h"
#include "retnet/core/form.h"
#include "retnet/model/model.h"
#include "retnet/model/state.h"

namespace retnet {

struct ForwardOptions {
  Form form = Form::Parallel;
  int64_t chunk = 0;      // chunkwise: tokens per chunk; 0 = the config's recurrent_chunk_size
  int64_t scan_tile = 0;  // scan: tokens per tile; 0 = chosen from a memory budget
  // Logits of each sequence's last token only ([B, vocab]): what prefill needs, without the
  // [B, T, vocab] product.
  bool last_logits_only = false;
};

// Arena floats that forward_logits needs for B x T tokens in this form.
size_t forward_workspace_floats(const Config& config, int64_t B, int64_t T,
                                const ForwardOptions& options);

// logits [B, T, vocab] (or [B, vocab], see last_logits_only) for tokens [B, T] (ids checked against
// the vocabulary).
// - parallel: from an empty state; `state` must be nullptr or empty. (Mixers with a cache also
//   continue a state view in the parallel form: that is their prefill.)
// - chunkwise, scan: continue from `state` (nullptr: a fresh one) and update it.
// - recurrent: the decode path, one token at a time through every layer; continues `state`.
// A form the model's mixer lacks (its MixerSpec) is an Error.
// The arena is reserved as needed and reset on entry.
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, State* state = nullptr);
// The same, continuing the sequences of a state view (not for the parallel form).
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, const StateView& state);

// A ragged prefill: B sequences of the state view (state.lengths[b] tokens each, >= 1, their
// tokens concatenated in `tokens`) continue their states in the chunkwise, scan or parallel form
// (as forward_logits of each alone would), and logits [B, vocab] of each one's last token. Every
// projection is one product over all the tokens; each mixer reads its own sequence's tokens.
void forward_ragged_last_logits(const Model& model, const int32_t* tokens, int64_t B,
                                float* logits, const ForwardOptions& options, Arena& arena,
                                const StateView& state);

// The final features [B, T, embed_dim] for tokens [B, T]: each position's hidden state after the
// last norm, what the output projection reads (embeddings). From an empty state, in the parallel,
// chunkwise or scan form (a fresh state where the form carries one); the arena as above.
void forward_features(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                      float* features, const ForwardOptions& options, Arena& arena);

// Speculative decoding's rollback: `state` (one sequence's constant state) becomes the state after
// the first `kept` (1 <= kept <= log.tokens) tokens of the checking pass that filled `log`, in
// closed form from the state before it (check_rewind.cpp). The arena must hold
// rewind_workspace_floats(model, kept) floats past its current use; the cache is not touched (a
// position past the kept tokens is never read).
size_t rewind_workspace_floats(const Model& model, int64_t tokens);
void rewind_checked_state(const Model& model, const CheckLog& log, int64_t kept, float* state,
                          Arena& arena);

}  // namespace retnet
