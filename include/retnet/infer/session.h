#pragma once
// A decoding session: a model and the recurrent states of up to `capacity` sequences. Prompts are
// prefilled with the chunkwise form in blocks (memory bounded by the block, never T x T), then all
// active sequences step together with the recurrent form, so every projection is one GEMM over the
// batch. A sequence's state is one contiguous block of floats; saving, restoring, adding and
// removing, forking and snapshotting sequences are memcpys. Front ends (the CLI) use this class.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "retnet/infer/sampler.h"
#include "retnet/infer/state_file.h"
#include "retnet/model/model.h"

namespace retnet {

class Arena;
class CoreWatch;
struct CheckLog;
struct State;

struct SessionOptions {
  int64_t capacity = 1;          // sequences the session can hold at once
  int64_t prefill_chunk = 0;     // chunkwise chunk size; 0: the config's recurrent_chunk_size
  int64_t prefill_block = 2048;  // tokens per prefill pass: bounds activation memory
  int64_t history = 256;         // recent tokens kept per sequence (repetition penalty)
  // Threads of a decode step; 0: automatic, one thread when a step's products are small (a fork
  // and join cost more than they save there, and a busy core stalls every barrier), else all.
  int decode_threads = 0;
  // With automatic threads whose waits spin (the engine's choice on free cores): sample the
  // machine every 100 ms and run passes on the calling thread alone while other processes share
  // the cores, so that a load arriving during a long run does not stall every barrier. Off for a
  // caller that chooses threads per pass itself (the server).
  bool watch_cores = true;
};

class Session {
 public:
  explicit Session(const Model& model, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Model& model() const { return model_; }
  int64_t batch() const { return active_; }
  int64_t capacity() const { return options_.capacity; }
  int64_t vocab() const { return model_.config().vocab_size; }

  // Appends an empty sequence (position 0, no logits yet); returns its index.
  int64_t add_sequence();
  // Drops sequence b; the ones after it move down one index, keeping their order.
  void remove_sequence(int64_t b);
  // Empties sequence b (position 0).
  void reset_sequence(int64_t b);

  // Feeds tokens to sequence b alone (chunkwise form, block by block); its logits become those
  // after the last token. T = 0 is allowed and changes nothing.
  void prefill(int64_t b, const int32_t* tokens, int64_t T);
  // Feeds several sequences their own tokens: tokens[i][0..lengths[i]) to sequences[i] (distinct,
  // any order; the others keep their state). The same as prefill() of each in turn, to float
  // rounding, in fewer passes: the sequences' tokens are read together, at most prefill_block
  // tokens a pass, every projection one product over them (the weights read once), each mixer
  // over its own sequence's tokens from its own state, from the same position in the same chunks.
  // A sequence given more than prefill_block tokens is read alone, block by block, as prefill()
  // reads it.
  void prefill(std::span<const int64_t> sequences, std::span<const int32_t* const> tokens,
               std::span<const int64_t> lengths);
  // One recurrent step for every active sequence: tokens[batch()] -> logits of each.
  void step(const int32_t* tokens);
  // One recurrent step for the listed sequences alone (distinct, any order; the others keep their
  // state): tokens[i] is fed to sequences[i]. Each state is advanced where it is, not copied: a
  // server steps its generating slots while others read their prompts.
  void step(std::span<const int64_t> sequences, const int32_t* tokens);

  // Logits after sequence b's last token ([vocab]); an error before it has consumed any.
  const float* logits(int64_t b) const;
  bool has_logits(int64_t b) const { return has_logits_.at(b); }
  // Tokens sequence b has consumed.
  int64_t position(int64_t b) const;
  // Next token of sequence b from its logits; `stream` keys the random draws (give each
  // independent sequence its own).
  int32_t sample(int64_t b, const SamplingParams& params, uint64_t stream = 0);
  // The same draw from other logits ([vocab]: sequence b's, adjusted), with b's position and
  // recent tokens.
  int32_t sample_logits(int64_t b, const float* logits, const SamplingParams& params,
                        uint64_t stream = 0);
  // The distribution those draws come from ([vocab] into probs), with b's recent tokens.
  void distribution(int64_t b, const float* logits, const SamplingParams& params, float* probs);

  // Sequence dst becomes a copy of sequence src (state, position, logits, recent tokens): a
  // shared prompt prefilled once, continued several ways.
  void fork(int64_t src, int64_t dst);
  // Sequence b in memory, without a file (a prompt cache keeps these), and back.
  SavedSequence snapshot(int64_t b) const;
  void restore(int64_t b, const SavedSequence& sequence);
  // Rolls sequence b back to `earlier`, a snapshot of b itself taken at an earlier (or the same)
  // position, discarding the tokens since: its constant-size state, logits and recent tokens come
  // back; its cached tokens up to there are still in place, so only the constant state is copied.
  void truncate(int64_t b, const SavedSequence& earlier);
  // For a model whose every layer keeps its tokens (no constant state): drops sequence b's tokens
  // after `position`, with no copy; it has no logits until it consumes a token again, and its
  // recent tokens lose the dropped ones.
  void truncate(int64_t b, int64_t position);

  // Speculative decoding's check: feeds tokens[0..n) to sequence b in one pass of the prefill form
  // (every product one over the n tokens; the constant-state layers record what they read, from
  // which accept computes a prefix's state in closed form) and returns the logits after each token ([n, vocab]; valid until the next
  // check). The sequence is left as after all n tokens; accept then keeps a prefix of them.
  const float* check(int64_t b, const int32_t* tokens, int64_t n);
  // Right after check(b, ...) of n tokens: leaves sequence b exactly as if only the first j + 1
  // (0 <= j < n) had been fed: the state after token j, its logits, its recent tokens.
  void accept(int64_t b, int64_t j);

  // Saves sequence b (state, position, logits, recent tokens) to a versioned, checksummed file
  // that names the model; atomic. `text_tail` (bytes of an unfinished UTF-8 character, say) is
  // stored and returned by load.
  void save(const std::string& path, int64_t b = 0, const std::string& text_tail = "") const;
  // Restores a saved sequence into b; throws Error if the file is damaged or from another model.
  std::string load(const std::string& path, int64_t b = 0);

  int64_t state_bytes_per_sequence() const { return model_.state_bytes_per_sequence(); }
  // What sequence b's state takes now: the constant-size state plus, for the mixers that keep
  // every token, its cached keys and values (growing with the position).
  int64_t state_bytes(int64_t b) const {
    return model_.state_bytes_per_sequence() + position(b) *
                                                   model_.config().cache_floats_per_token() *
                                                   static_cast<int64_t>(sizeof(float));
  }
  // Sequence b's constant-size state in place (state_bytes_per_sequence() bytes; empty for the
  // mixers that keep every token): a binding shows it without a copy, and what is written there
  // is what the next step reads.
  float* state_data(int64_t b);
  // Taken when the session starts, or on first use for a model whose weights are used in place
  // (hashing them would read the whole file).
  uint64_t model_fingerprint() const {
    return fingerprint_ ? *fingerprint_ : retnet::model_fingerprint(model_);
  }
  // Bytes of sequence states copied so far: snapshots, restores (state files included), forks,
  // and the later sequences remove_sequence moves down one index.
  // Any thread may read it while the session's thread works (a server's metrics).
  int64_t state_bytes_copied() const { return bytes_copied_.load(std::memory_order_relaxed); }
  // The thread count steps run with (after resolving "automatic").
  int decode_threads() const { return decode_threads_; }
  // Changes it for the following steps (n >= 1): a caller that knows its steps' size and its
  // OpenMP wait policy (the server's) picks per step.
  void set_decode_threads(int n);
  // Passes run on one thread because the core watch saw the cores shared (watch_cores).
  int64_t shared_core_passes() const { return shared_core_passes_; }

 private:
  void check_index(int64_t b) const;
  void remember(int64_t b, int32_t token);
  // A snapshot's logits and recent tokens into sequence b (restore, truncate).
  void take_logits_and_history(int64_t b, const SavedSequence& s);

  const Model& model_;
  SessionOptions options_;
  std::optional<uint64_t> fingerprint_;
  int decode_threads_ = 0;
  std::unique_ptr<CoreWatch> watch_;  // null: passes take the threads chosen
  int64_t shared_core_passes_ = 0;
  // `threads`, or 1 while the watch sees the cores shared.
  int watched(int threads);
  int64_t active_ = 0;
  mutable std::atomic<int64_t> bytes_copied_{0};  // snapshot() is const
  std::unique_ptr<State> state_;     // the model layer's state and scratch, private to the session
  std::vector<float> logits_;        // [capacity, vocab]
  std::vector<uint8_t> has_logits_;  // [capacity]
  std::vector<std::vector<int32_t>> recent_;  // per sequence, at most options_.history
  std::unique_ptr<Arena> arena_;
  SamplerScratch scratch_;
  // A step over chosen sequences: their rows, positions and logits in step order, and which rows
  // it takes ([capacity] each; sized once, so steps do not allocate).
  std::vector<int64_t> every_row_, step_rows_, step_positions_;
  std::vector<float> step_logits_;
  std::vector<uint8_t> stepping_;
  // A batched prefill's pass: its sequences' lengths and tokens, concatenated.
  std::vector<int64_t> pass_lengths_;
  std::vector<int32_t> pass_tokens_;
  // Runs one batched prefill pass over step_rows_[0..n) (their lengths and tokens in pass_*).
  void prefill_pass(int64_t n);
  // The last check: its sequence, start position and tokens, the logits, (constant-state models)
  // what rewinds its state to any prefix, and the recent tokens before it; `live`: the checked
  // tokens the sequence's constant state is after (an accept moves its position alone).
  struct Check {
    int64_t sequence = -1, start = 0, live = 0;
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    std::unique_ptr<CheckLog> log;
    std::vector<int32_t> recent;
  };
  mutable Check check_;  // settled by const snapshot(): a copy callers never see
  // Brings an accepted prefix's constant state into its sequence, before anything reads it.
  void settle_check() const;
  // settle_check(); the check can no longer be accepted (the session changes otherwise).
  void end_check();
};

}  // namespace retnet
