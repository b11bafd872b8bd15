#pragma once
// The decoding state of B sequences, and views of it. Per sequence one contiguous block of the
// mixer's constant-size state (retention: [layers, H, d_k, d_v + 1]), for the mixers that keep
// every token a cache of their keys and values, and the number of tokens consumed. Saving,
// restoring, forking and batching sequences are memcpys.
#include <cstdint>
#include <vector>

#include "retnet/model/config.h"

namespace retnet {

// What the mixers that keep every token (attention, aft) keep of each earlier token: per layer one
// block per sequence (of the layers that keep tokens: a hybrid model's attention layers) of
// `capacity` token rows of that layer's row_floats[l] floats (keys, then values; layers may differ:
// an attention layer with fewer kv heads caches less). The first position[b] rows of sequence b's
// blocks are filled. Grows by doubling (amortised O(1) per token, no allocation while there is
// room), so its memory grows with the longest sequence.
struct TokenCache {
  int64_t layers = 0, sequences = 0, capacity = 0;
  int64_t floats_per_token = 0;      // all layers together
  std::vector<int64_t> row_floats;   // per layer
  std::vector<std::vector<float>> storage;  // per layer [sequences, capacity, row_floats[l]]
  bool empty() const { return floats_per_token == 0; }
  float* block(int64_t layer, int64_t b) {
    return storage[layer].data() + b * capacity * row_floats[layer];
  }
  const float* block(int64_t layer, int64_t b) const {
    return storage[layer].data() + b * capacity * row_floats[layer];
  }
  // Room for `tokens` rows per sequence; keeps every filled row.
  void reserve(int64_t tokens);
  // Copies the first `rows` rows of sequence `from` (all layers) over those of `to`.
  void copy_sequence(int64_t from, int64_t to, int64_t rows);
  size_t bytes() const;
};

// What a checking pass's constant-state layers consumed, for keeping any prefix of its tokens
// afterwards: the sequence's constant state before the pass, and per layer the input projections
// [tokens, P] before the mixer read them (the rotation rows follow from the positions). The state
// after the first j tokens is then the start state decayed j steps plus the decayed sum of those
// tokens' key-value terms: one chunk of the mixer's chunkwise form over the recorded rows, with
// no weight read again and no state stored per token.
struct CheckLog {
  int64_t tokens = 0, start = 0;   // tokens checked; the sequence's position before them
  std::vector<float> start_state;  // floats_per_sequence
  // Per layer (empty for a layer without a constant state). Grown, never shrunk.
  std::vector<std::vector<float>> proj;
};

// A view of the states of `batch` sequences: `floats_per_sequence` floats each, and the number of
// tokens each has consumed ([batch]); for the mixers with a cache, the cache and the index in it of
// the view's first sequence. The sequences are contiguous from `data`, or, for a decode step over
// some of a session's sequences (or a ragged pass), rows[b] is the row (from `data`, and in the
// cache) of sequence b.
// A view of one sequence of a larger state is how a session prefills one prompt of a batch.
struct StateView {
  float* data = nullptr;
  int64_t* positions = nullptr;
  int64_t batch = 0;
  int64_t floats_per_sequence = 0;
  TokenCache* cache = nullptr;
  int64_t first = 0;
  const int64_t* rows = nullptr;  // nullptr: sequence b is row first + b
  // A checking pass (one sequence, T tokens, not the recurrent form): the constant-state layers
  // record what they consume, so that any prefix's state can be recomputed in closed form
  // (rewind_checked_state). nullptr: off.
  CheckLog* check_log = nullptr;
  // A ragged pass (the chunkwise, scan or parallel form): sequence b reads lengths[b] tokens, the
  // sequences' tokens concatenated; each sequence's mixers run over its own tokens from its own
  // state (rows[b] or first + b), the products around them over all the tokens at once. nullptr:
  // every sequence reads the pass's T tokens.
  const int64_t* lengths = nullptr;
};

// The owning state of `batch` sequences.
struct State {
  State(const Config& config, int64_t batch);
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
  // Empties every sequence, or sequence b (position 0; a cache's rows past it are never read).
  void reset();
  void reset(int64_t b);
  // Sequence dst becomes a copy of sequence src: state, position and cached tokens.
  void fork(int64_t src, int64_t dst);
  // Drops sequence b of the first `active`: the ones after it move down one index.
  void remove(int64_t b, int64_t active);

  // A snapshot of sequence b in a caller's buffers: its constant state (floats_per_sequence
  // floats), and per layer its position's cache rows (cache_floats(b) floats in all). restore
  // takes the position it was taken at. One copy each way.
  int64_t cache_floats(int64_t b) const;
  // Bytes of sequence b: its constant state and its filled cache rows.
  int64_t sequence_bytes(int64_t b) const {
    return (floats_per_sequence + cache_floats(b)) * static_cast<int64_t>(sizeof(float));
  }
  void snapshot(int64_t b, float* state_out, float* cache_out) const;
  void restore(int64_t b, const float* state_in, const float* cache_in, int64_t position);
  // Rolls sequence b back to `position` (<= its own) with the constant state it had there; the
  // cache's first `position` rows are the same tokens' and stay in place.
  void rewind(int64_t b, const float* state_in, int64_t position);
};

}  // namespace retnet
