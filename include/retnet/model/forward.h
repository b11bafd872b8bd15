#pragma once
// Forward passes of the language model in any retention form, and the recurrent state that the
// recurrent, chunkwise and scan forms carry between calls.
#include <cstdint>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/model.h"

namespace retnet {

// The state of B sequences: per sequence one contiguous block [layers, H, d_k, d_v + 1] (saving,
// restoring and batching states is a memcpy), plus the number of tokens each has consumed.
// A view of the states of `batch` sequences: `floats_per_sequence` floats each, contiguous, and
// the number of tokens each has consumed. A view of one sequence of a larger state is how a
// session prefills one prompt of a batch.
struct StateView {
  float* data = nullptr;
  int64_t* positions = nullptr;
  int64_t batch = 0;
  int64_t floats_per_sequence = 0;
};

struct RecurrentState {
  RecurrentState(const Config& config, int64_t batch);
  int64_t batch = 0;
  int64_t floats_per_sequence = 0;
  std::vector<float> data;
  std::vector<int64_t> positions;
  float* sequence(int64_t b) { return data.data() + b * floats_per_sequence; }
  const float* sequence(int64_t b) const { return data.data() + b * floats_per_sequence; }
  StateView view() { return {data.data(), positions.data(), batch, floats_per_sequence}; }
  StateView view(int64_t b) { return {sequence(b), positions.data() + b, 1, floats_per_sequence}; }
  void reset();
};

struct ForwardOptions {
  RetentionForm form = RetentionForm::Parallel;
  int64_t chunk = 0;      // chunkwise: tokens per chunk; 0 = the config's recurrent_chunk_size
  int64_t scan_tile = 0;  // scan: tokens per tile; 0 = chosen from a memory budget
  // Logits of each sequence's last token only ([B, vocab]): what prefill needs, without the
  // [B, T, vocab] product.
  bool last_logits_only = false;
};

// Arena floats that forward_logits needs for B x T tokens in this form.
size_t forward_workspace_floats(const Config& config, int64_t B, int64_t T,
                                const ForwardOptions& options);

// logits [B, T, vocab] (or [B, vocab], see last_logits_only) for tokens [B, T] (ids checked against the vocabulary).
// - parallel: from an empty state; `state` must be nullptr.
// - chunkwise, scan: continue from `state` (nullptr: a fresh one) and update it.
// - recurrent: the decode path, one token at a time through every layer; continues `state`.
// The arena is reserved as needed and reset on entry.
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                    float* logits, const ForwardOptions& options, Arena& arena,
                    RecurrentState* state = nullptr);
// The same, continuing the sequences of a state view (not for the parallel form).
void forward_logits(const Model& model, const int32_t* tokens, int64_t B, int64_t T,
                    float* logits, const ForwardOptions& options, Arena& arena,
                    const StateView& state);

}  // namespace retnet
