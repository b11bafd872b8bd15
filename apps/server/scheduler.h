#pragma once
// Continuous batching on one inference thread. The thread owns two sessions over the same model:
// a prefill session, where new prompts are read with the chunkwise form in bounded segments, and a
// decode session with one sequence per generating slot. Each loop reads at most one block of
// prompt tokens (shared by the waiting prompts in turn) and then runs one batched step in which
// every generating slot advances one token, so running streams keep flowing while prompts are read.
// A finished prompt's state moves into the decode session (a memcpy); a slot leaves the moment its
// stream ends, its client disconnects or its deadline passes. HTTP threads only queue jobs; a full
// queue is refused at once.
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "job.h"
#include "metrics.h"
#include "prompt_cache.h"
#include "retnet/retnet.h"

namespace retnet::server {

struct SchedulerOptions {
  int64_t slots = 4;            // sequences decoding together (--parallel)
  int64_t max_queue = 64;       // jobs waiting for a slot before 429
  int64_t prefill_block = 512;  // prompt tokens per prefill pass between decode steps
  int64_t cache_bytes = 0;      // prompt cache capacity; 0: no cache
  int threads = 0;              // decode threads (0: the session decides)
  int64_t history = 256;        // recent tokens kept for the repetition penalty
};

class Scheduler {
 public:
  Scheduler(const Model& model, const Tokenizer& tokenizer, const SchedulerOptions& options,
            Metrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Admission { Queued, QueueFull, ShuttingDown };
  Admission submit(const std::shared_ptr<Job>& job);
  // Ends every queued and running job with `reason` as its error and stops the thread.
  void shutdown(const std::string& reason);

  // GET /slots: each slot's phase, position and state size.
  nlohmann::json slots_json();
  // Saves slot `id`'s last state (the prompt cache entry of its last request) to `path`, or
  // restores one from there into the prompt cache; returns a JSON summary. Error on bad input.
  nlohmann::json save_slot(int64_t id, const std::string& path);
  nlohmann::json restore_slot(int64_t id, const std::string& path);

  int64_t prefill_block() const { return block_; }

 private:
  enum class Phase { Idle, Waiting, Prefill, Decode };
  struct Slot {
    int64_t id = 0;
    Phase phase = Phase::Idle;
    std::shared_ptr<Job> job;
    int64_t prefilled = 0;  // prompt tokens the prefill session has consumed
    int64_t generated = 0;
    int64_t position = 0, state_bytes = 0;  // copies for /slots, updated under the lock
    std::vector<int32_t> fed;               // generated tokens the state has consumed
    std::unique_ptr<SequenceDecoder> decoder;  // the request's decode rule and released text
    std::vector<int32_t> last_tokens;  // tokens of its last finished request (for save)
    std::optional<SavedSequence> last_state;
    Clock::time_point started;
  };

  void loop();
  bool sweep_locked();   // admits queued jobs, ends cancelled and late ones; true if work remains
  void prefill_round();  // up to one block of prompt tokens, shared by waiting prompts in turn
  void start_prefill(Slot& slot, int64_t b);  // restores the longest cached prefix into b
  int64_t next_segment_end(const Slot& slot) const;
  // Reads slot's next segment into prefill sequence b; true if its prompt is done (it left
  // prefilling_: moved to the decode session, or finished).
  bool prefill_segment(Slot& slot, int64_t b);
  void decode_one_step();
  int step_threads() const;  // threads for the next step with --threads 0
  // Ends the slot's job (reason "stop"/"length", or an error and its HTTP status) and frees it.
  void finish(Slot& slot, FinishReason reason, const std::string& error = "",
              int error_status = 0);
  void release(Slot& slot);  // removes the slot's sequence from whichever session holds it
  void emit(Slot& slot, const std::string& text, const TokenLogprob* logprob);
  TokenLogprob logprob_of(const float* logits, int32_t token, int top) const;
  void update_gauges_locked();

  const Model& model_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  Metrics& metrics_;
  int64_t chunk_ = 1, block_ = 1;
  Session prefill_session_;
  Session decode_session_;
  PromptCache cache_;
  int full_threads_ = 1;  // the decode session's automatic choice, for steps worth splitting

  std::mutex mutex_;  // guards queue_, slots_' phases and jobs, stopping_
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Slot> slots_;
  std::vector<int64_t> decoding_;    // slot ids in decode-session order
  std::vector<int64_t> prefilling_;  // slot ids in prefill-session order (admitted, not decoding)
  int64_t next_prefill_ = 0;         // index in prefilling_ of the prompt served next
  bool stopping_ = false;
  std::string stop_reason_;
  std::thread thread_;
};

}  // namespace retnet::server
