#pragma once
// Forward passes of the language model in any form its mixer has, and the state (and, for the
// mixers that keep every token, the cache) that the forms carry between calls.
#include <cstdint>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/model.h"

namespace retnet {

// What the mixers with a cache (attention, aft) keep of every earlier token: per layer one block
// per sequence of `capacity` token rows of `floats_per_token` floats (keys, then values). The
// first position[b] rows of sequence b's blocks are filled. Grows by doubling (amortised O(1) per
// token, no allocation while there is room), so its memory grows with the longest sequence.
struct TokenCache {
  int64_t layers = 0, floats_per_token = 0, sequences = 0, capacity = 0;
  std::vector<std::vector<float>> storage;  // per layer [sequences, capacity, floats_per_token]
  bool empty() const { return floats_per_token == 0; }
  float* block(int64_t layer, int64_t b) {
    return storage[layer].data() + b * capacity * floats_per_token;
  }
  // Room for `tokens` rows per sequence; keeps every filled row.
  void reserve(int64_t tokens);
  // Copies the first `rows` rows of sequence `from` (all layers) over those of `to`.
  void copy_sequence(int64_t from, int64_t to, int64_t rows);
  size_t bytes() const;
};

// A view of the states of `batch` sequences: `floats_per_sequence` floats each, contiguous, and
// the number of tokens each has consumed; for the mixers with a cache, the cache and the index in
// it of the view's first sequence. A view of one sequence of a larger state is how a session
// prefills one prompt of a batch.
struct StateView {
  float* data = nullptr;
  int64_t* positions = nullptr;
  int64_t batch = 0;
  int64_t floats_per_sequence = 0;
  TokenCache* cache = nullptr;
  int64_t first = 0;
};

// The state of B sequences: per sequence one contiguous block of the mixer's constant-size state
// (retention: [layers, H, d_k, d_v + 1]; saving, restoring and batching states is a memcpy), the
// cache of the mixers that keep every token, and the number of tokens each has consumed.
struct RecurrentState {
  RecurrentState(const Config& config, int64_t batch);
  int64_t batch = 0;
  int64_t floats_per_sequence = 0;
  std::vector<float> data;
  std::vector<int64_t> positions;
  TokenCache cache;
  float* sequence(int64_t b) { return data.data() + b * floats_per_sequence; }
  const float* sequence(int64_t b) const { return data.data() + b * floats_per_sequence; }
  StateView view() {
    return {data.data(), positions.data(), batch, floats_per_sequence, &cache, 0};
  }
  StateView view(int64_t b) {
    return {sequence(b), positions.data() + b, 1, floats_per_sequence, &cache, b};
  }
  void reset();
};

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
// A form the model's mixer lacks (mixer.h) is an Error.
// The arena is reserved as needed and reset on entry.
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, RecurrentState* state = nullptr);
// The same, continuing the sequences of a state view (not for the parallel form).
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T, float* logits,
                    const ForwardOptions& options, Arena& arena, const StateView& state);

}  // namespace retnet
