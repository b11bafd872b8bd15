#pragma once
// Internal to the reference backend: each mixer family's forward over a pass, computed from its
// definition in double precision (one file per family), and what they share: where a sequence's
// state and cached tokens are, its positions, and the rotation of its queries and keys. None of
// it calls a mixer's forward or the kernels the CPU backend mixes with: the definitions are the
// naive *_reference functions the mixers' tests check every form against.
#include <cstdint>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/sequence_rows.h"
#include "retnet/model/mixer_layer.h"

namespace retnet::detail::reference {

// Each writes the pass's output [B T, vd] to p.out and returns it; the pass's state and cache, if
// it has them, are read and left as the CPU mixer leaves them. p.proj is only read.
const float* retention_forward(const MixerPass& p);
const float* kernel_attention_forward(const MixerPass& p);  // linear transformer, Performer
const float* decay_forward(const MixerPass& p);             // RWKV, AFT-simple
const float* attention_forward(const MixerPass& p);
const float* aft_forward(const MixerPass& p);

// Sequence b's state in the pass (its row: rows[b], or b); nullptr when the pass has none.
inline float* sequence_state(const MixerPass& p, int64_t b) {
  return p.state ? p.state + sequence_row(p.rows, b) * p.state_stride : nullptr;
}

// Tokens sequence b has consumed before the pass.
inline int64_t start_position(const MixerPass& p, int64_t b) {
  return p.positions ? p.positions[b] : 0;
}

// Rotates x [heads, dk] (token t of sequence b) by the pass's table, in double: each pair of the
// model's rotation style turned by the angle whose cos | sin the table's row holds.
void rotate(const MixerPass& p, double* x, int64_t heads, int64_t dk, int64_t b, int64_t t);

// The tokens a cache mixer attends over, for sequence b: the rows its cache holds (the first
// start_position of them) followed by the pass's own, `row_floats` each. The pass's rows are also
// written to the cache when it has one, so that the next pass (on either backend) finds them.
class SequenceTokens {
 public:
  SequenceTokens(const MixerPass& p, int64_t b, int64_t row_floats);
  int64_t past() const { return past_; }
  // Row n (0 .. past + T - 1): what position n's token cached.
  const float* row(int64_t n) const { return rows_.data() + n * row_floats_; }
  // Sets the pass's token t's row (the cache's copy too).
  void set(int64_t t, const std::vector<float>& row);

 private:
  int64_t past_ = 0, row_floats_ = 0;
  float* cache_ = nullptr;  // the sequence's cache block, or nullptr
  std::vector<float> rows_;
};

}  // namespace retnet::detail::reference
