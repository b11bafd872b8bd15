#pragma once
// Continuous batching on one inference thread. The thread owns one session over the model with one
// sequence per slot: a slot's state stays in its own row from its prompt to its last token, and
// after (for a save). Each loop reads at most one block of prompt tokens (shared by the waiting
// prompts in turn, with the chunkwise form, read together in one batched pass) and then runs one
// batched step in which every generating slot advances one token, so running streams keep
// flowing while prompts are read; a
// slot whose prompt is read joins the steps where it is (a phase change, no copy). A job with n
// choices takes n slots at once (the queue is first come, first served): one reads the prompt and
// the others fork its state, so the prompt is read once. A slot leaves
// the moment its stream ends, its client disconnects or its deadline passes. HTTP threads only
// queue jobs; a full queue is refused at once. A stream decoding speculatively (prompt lookup or a
// draft model) checks its pending token and the drafted ones in a pass of its own beside the
// batched step (scheduler_speculative.cpp).
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
#include "serve_options.h"
#include "thread_team.h"
#include "retnet/core/core_watch.h"
#include "retnet/infer/grammar.h"
#include "retnet/infer/speculative.h"
#include "retnet/retnet.h"

namespace retnet::server {

struct SchedulerOptions {
  int64_t slots = 4;            // sequences decoding together (--parallel)
  int64_t max_queue = 64;       // jobs waiting for a slot before 429
  int64_t prefill_block = 512;  // prompt tokens per prefill pass between decode steps
  // Most prompts whose segments are read in one batched pass (--prefill-batch; 0: every prompt of
  // the round, 1: one prompt per pass, kPrefillBatchAuto: while the pass is small, below).
  int64_t prefill_batch = kPrefillBatchAuto;
  // With kPrefillBatchAuto, a pass takes prompts while its multiply-adds (tokens x parameters)
  // stay within this bound: smaller passes cost mostly their fixed work (threads woken for every
  // parallel region, a layer's bookkeeping), which prompts read together pay once; larger ones
  // are compute-bound, where reading together saves nothing and only delays the first tokens
  // (docs/server.md#prompts-read-together).
  int64_t prefill_batch_macs = int64_t{1} << 32;
  int64_t cache_bytes = 0;      // prompt cache capacity; 0: no cache
  std::string cache_dir;        // the prompt cache's disk tier ("": none)
  int64_t cache_dir_bytes = 0;  // its capacity
  bool cache_bf16 = false;      // the memory tier keeps bfloat16 states (--cache-type)
  int threads = 0;              // decode threads (0: the session decides)
  int64_t history = 256;        // recent tokens kept for the repetition penalty
  // Speculating slots draft only while at most this many slots decode: with more, one batched
  // step reads the weights once for all of them, and each check pass would read them again.
  int64_t speculate_max_streams = 1;
  // The draft model of the jobs that draft with one (Job::draft_model; not owned; the same
  // vocabulary): each slot gets a sequence of its own in a session over it.
  const Model* draft_model = nullptr;
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
  // Saves idle slot `id`'s state (where its last request ended) to `path`, or restores one from
  // there into the slot and the prompt cache; returns a JSON summary. Error on bad input; a busy
  // slot is refused (409).
  nlohmann::json save_slot(int64_t id, const std::string& path);
  nlohmann::json restore_slot(int64_t id, const std::string& path);
  // Forgets idle slot `id`'s state (its next request starts from scratch or the prompt cache).
  nlohmann::json erase_slot(int64_t id);

  int64_t prefill_block() const { return block_; }
  // Runs `work` on the calling thread between the inference thread's passes (under the session's
  // lock), so that it has the model and the cores to itself: embeddings. The calling thread's
  // OpenMP team ends with it (thread_team.h).
  template <class F>
  void run_between_passes(F&& work) {
    std::lock_guard<std::mutex> lock(session_mutex_);
    struct Team {
      explicit Team(int threads) { adopt_engine_threads(threads); }
      ~Team() { release_thread_team(); }
    } team(options_.threads);
    work();
  }

 private:
  enum class Phase { Idle, Waiting, Prefill, Decode };
  struct Slot {
    int64_t id = 0;
    Phase phase = Phase::Idle;
    std::shared_ptr<Job> job;
    // Which of the job's choices it makes. Choice 0 reads the prompt; the others wait (phase
    // Waiting, outside prefilling_) and then start from a fork of its state.
    int64_t choice = 0;
    int64_t prefilled = 0;  // prompt tokens its sequence has consumed
    int64_t generated = 0;
    int64_t position = 0, state_bytes = 0;     // copies for /slots, updated under the lock
    std::vector<int32_t> fed;                  // generated tokens the state has consumed
    std::unique_ptr<SequenceDecoder> decoder;  // the request's decode rule and released text
    // Speculative decoding: the adaptive draft length (none: the job does not speculate). The
    // token chosen and emitted but not fed yet (-1: none): a check's pick where a draft differed,
    // or the first token, chosen as soon as the prompt is read.
    std::optional<DraftLength> draft_length;
    int32_t pending = -1;
    // With a draft model: tokens of the slot's text (prompt, then fed) the draft's sequence has
    // consumed (0: it starts over), and that sequence before the drafts under check.
    int64_t draft_fed = 0;
    std::optional<SavedSequence> draft_before;
    // Its sequence holds the state after last_tokens: the last request that reached decoding
    // (for save), or a restored state.
    bool has_state = false;
    std::vector<int32_t> last_tokens;
    Clock::time_point started;
  };

  void loop();
  bool sweep_locked();   // admits queued jobs, ends cancelled and late ones; true if work remains
  void admit(Slot& slot, const std::shared_ptr<Job>& job, int64_t choice);
  // Choice 0's prompt is read: its other choices start decoding from copies of its state.
  void start_choices(Slot& lead);
  void prefill_round();  // up to one block of prompt tokens, shared by waiting prompts in turn
  void start_prefill(Slot& slot);  // restores the longest cached prefix into its sequence
  int64_t next_segment_end(const Slot& slot) const;
  // Where the slot's next segment ends if the prompt cache snapshots it there, else 0.
  int64_t snapshot_end(const Slot& slot) const;
  // Reads the next segment of each slot in `group` in one batched pass, then empties `group`.
  void prefill_group(std::vector<Slot*>& group);
  // After a slot's segment up to `end` is read: the cache's snapshot, the slot's progress and, at
  // the prompt's end, its move to decoding (or its end).
  void segment_read(Slot& slot, int64_t end);
  void decode_one_step();
  // What choose_next chose: a token to feed, or the end of the slot's text (finish not None), or
  // an output constraint's failure (error set).
  struct Chosen {
    int32_t token = -1;
    FinishReason finish = FinishReason::None;
    std::string error;
  };
  // The slot's next token by its request's decode rule, its text emitted.
  Chosen choose_next(Slot& slot);
  // The first token of each slot whose prompt `group`'s pass finished (and of its other choices),
  // chosen and sent at once rather than after the other prompts of the round.
  void first_tokens(const std::vector<Slot*>& group);
  // The tokens prompt lookup or the draft model drafts after `pending` for a speculating slot
  // (empty: a plain step).
  void draft_after(Slot& slot, int32_t pending, std::vector<int32_t>& draft);
  // The draft model's k tokens after `pending`: its sequence first catches up with the text.
  void draft_with_model(Slot& slot, int32_t pending, int64_t k, std::vector<int32_t>& draft);
  // One check of `checked` (the pending token, then the drafts) for the slot alone: the decode
  // rule picks from the checked logits, drafts are kept while it picks them, and its first other
  // pick becomes the slot's pending token. A pick that ends the stream is returned in `reason`
  // (FinishReason::None: it goes on), with `error` set when the output constraint failed.
  void check_drafts(Slot& slot, const std::vector<int32_t>& checked, FinishReason& reason,
                    std::string& error);
  int pass_threads(int64_t tokens) const;  // threads for a step of this many tokens, --threads 0
  // Ends the slot's job (reason "stop"/"length", or an error and its HTTP status) and frees it.
  void finish(Slot& slot, FinishReason reason, const std::string& error = "", int error_status = 0);
  void release(Slot& slot);  // takes the slot out of prefilling_ or decoding_
  void emit(Slot& slot, const std::string& text, const TokenLogprob* logprob);
  TokenLogprob logprob_of(const float* logits, int32_t token, int top) const;
  void update_gauges_locked();
  void check_idle_locked(int64_t id) const;  // HttpError 409 when slot id is busy

  const Model& model_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  Metrics& metrics_;
  int64_t chunk_ = 1, block_ = 1;
  // Slot i's sequence is sequence i. Guarded by session_mutex_ (taken before mutex_): the
  // inference thread holds it while it runs the model, save and restore while they copy a state.
  Session session_;
  std::mutex session_mutex_;
  PromptCache cache_;
  std::shared_ptr<const TokenTrie> trie_;  // the vocabulary's bytes, built for the first grammar
  int full_threads_ = 1;  // the session's automatic choice, for steps worth splitting
  // OpenMP's threads spin (the engine's choice on free cores): the inference thread watches
  // whether other work comes to share the cores, and passes run on it alone while it does.
  bool spinning_ = false;
  bool cores_shared_ = false;
  CoreWatch watch_;
  // Scratch: a speculating slot's text, searched by prompt lookup.
  std::vector<int32_t> lookup_text_;
  // With a draft model: its session (one sequence per slot, made at the first draft), and the
  // scratch of a draft (the pending token and the drafts, their distributions).
  std::unique_ptr<Session> draft_session_;
  std::vector<int32_t> draft_checked_;
  std::vector<float> draft_q_;
  // Scratch of a batched prefill pass: its sequences, their segments' tokens and lengths.
  std::vector<int64_t> group_ids_, group_lengths_, group_ends_;
  std::vector<const int32_t*> group_tokens_;

  std::mutex mutex_;  // guards queue_, slots_' phases and jobs, stopping_
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Slot> slots_;
  std::vector<int64_t> decoding_;    // slot ids in step order (the order they started decoding)
  std::vector<int64_t> prefilling_;  // slot ids admitted, not decoding, in admission order
  int64_t next_prefill_ = 0;         // index in prefilling_ of the prompt served next
  bool stopping_ = false;
  std::string stop_reason_;
  std::thread thread_;
};

}  // namespace retnet::server
