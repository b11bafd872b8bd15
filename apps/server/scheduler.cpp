#include "scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <utility>

#include "openai_request.h"
#include "openai_response.h"
#include "retnet/core/parallel.h"
#include "retnet/core/thread_policy.h"
#include "thread_team.h"

namespace retnet::server {
namespace {

SessionOptions session_options(int64_t capacity, int64_t block, const SchedulerOptions& o) {
  SessionOptions so;
  so.capacity = capacity;
  so.prefill_block = block;
  so.history = std::max<int64_t>(o.history, 1);
  so.decode_threads = std::max(o.threads, 0);
  so.watch_cores = false;  // the scheduler watches the cores and picks each pass's threads
  return so;
}

int64_t micros_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// The prefill block rounded to whole chunks, so that every block boundary is a chunk boundary and
// a prompt read in blocks (or restored from the cache at a boundary) runs the very same chunks as
// one read whole, as `retnet generate` does.
int64_t aligned_block(int64_t block, int64_t chunk) {
  return std::max<int64_t>(chunk, block / chunk * chunk);
}

}  // namespace

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer,
                     const SchedulerOptions& options, Metrics& metrics)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      chunk_(std::max<int64_t>(1, model.config().recurrent_chunk_size)),
      block_(aligned_block(options.prefill_block, chunk_)),
      session_(model, session_options(options.slots, block_, options)),
      cache_(options.cache_bytes, options.cache_bf16),
      full_threads_(session_.decode_threads()),
      spinning_(!threads_sleep_at_once()) {
  RETNET_CHECK(options.slots >= 1, "--parallel must be >= 1, got {}", options.slots);
  RETNET_CHECK(options.max_queue >= 0, "--max-queue must be >= 0, got {}", options.max_queue);
  for (int64_t i = 0; i < options.slots; ++i) session_.add_sequence();
  slots_.resize(static_cast<size_t>(options.slots));
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].id = static_cast<int64_t>(i);
  metrics_.slots = options.slots;
  if (!options.cache_dir.empty()) {
    RETNET_CHECK(options.cache_bytes > 0,
                 "--cache-dir needs the memory tier of the prompt cache (--state-cache-mib > 0)");
    cache_.attach_disk(std::make_unique<DiskPromptCache>(
        options.cache_dir, options.cache_dir_bytes, model, session_.model_fingerprint(),
        [](const std::string& line) {
          std::fprintf(stderr, "retnet serve: %s\n", line.c_str());
          std::fflush(stderr);
        },
        options.cache_bf16 ? StateDtype::BF16 : StateDtype::F32));
  }
  // The team of the thread that loaded the model goes: the inference thread's is the one left.
  release_thread_team();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown("the server is shutting down"); }

Scheduler::Admission Scheduler::submit(const std::shared_ptr<Job>& job) {
  RETNET_CHECK(job->n >= 1 && job->n <= options_.slots,
               "a job of {} choices needs as many slots (the server has {})", job->n,
               options_.slots);
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return Admission::ShuttingDown;
  // Queued jobs that idle slots will take at the next loop do not count against --max-queue.
  const int64_t idle = std::count_if(slots_.begin(), slots_.end(),
                                     [](const Slot& s) { return s.phase == Phase::Idle; });
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue + idle) return Admission::QueueFull;
  queue_.push_back(job);
  metrics_.requests += 1;
  update_gauges_locked();
  wake_.notify_one();
  return Admission::Queued;
}

void Scheduler::shutdown(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    stop_reason_ = reason;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Scheduler::update_gauges_locked() {
  int64_t busy = 0, bytes = 0;
  for (const Slot& s : slots_)
    if (s.phase != Phase::Idle) {
      ++busy;
      bytes += s.state_bytes;
    }
  metrics_.busy_slots = busy;
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  metrics_.state_bytes = bytes;
  metrics_.cache_bytes = cache_.bytes();
  metrics_.cache_entries = cache_.entries();
  if (const DiskPromptCache* disk = cache_.disk()) {
    metrics_.cache_disk_hits = cache_.disk_hits();
    metrics_.cache_disk_bytes = disk->bytes();
    metrics_.cache_disk_entries = disk->entries();
  }
  metrics_.state_bytes_copied = session_.state_bytes_copied();
}

void Scheduler::emit(Slot& slot, const std::string& text, const TokenLogprob* logprob) {
  Job& job = *slot.job;
  std::lock_guard<std::mutex> lock(job.mutex);
  ChoiceOutput& out = job.choices[static_cast<size_t>(slot.choice)];
  out.text += text;
  if (logprob) out.logprobs.push_back(*logprob);
  out.completion_tokens = slot.generated;
  job.last_token = Clock::now();
  if (job.streamed) job.changed.notify_all();
}

void Scheduler::finish(Slot& slot, FinishReason reason, const std::string& error,
                       int error_status) {
  Job& job = *slot.job;
  std::string tail;
  if (slot.decoder) tail = slot.decoder->finish(nullptr);
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    ChoiceOutput& out = job.choices[static_cast<size_t>(slot.choice)];
    out.text += tail;
    out.finished = true;
    out.finish_reason = reason == FinishReason::None ? "" : openai_finish_reason(reason);
    out.completion_tokens = slot.generated;
    if (!error.empty()) {  // the reply is this error, whatever the other choices do
      job.error = error;
      job.error_status = error_status;
    }
    job.finished =
        !job.error.empty() || std::all_of(job.choices.begin(), job.choices.end(),
                                          [](const ChoiceOutput& c) { return c.finished; });
    job.changed.notify_all();
  }
  release(slot);
  slot.job.reset();
  slot.decoder.reset();
  slot.phase = Phase::Idle;
  slot.prefilled = slot.generated = slot.position = slot.state_bytes = slot.choice = 0;
  slot.fed.clear();
  slot.draft_length.reset();
  slot.draft_before.reset();
  slot.pending = -1;
  update_gauges_locked();
}

void Scheduler::release(Slot& slot) {
  if (slot.phase == Phase::Decode) {
    // The finished conversation's state stays in the slot's sequence for POST
    // /slots/{id}?action=save, until the slot's next request.
    slot.has_state = true;
    slot.last_tokens = slot.job->prompt;
    slot.last_tokens.insert(slot.last_tokens.end(), slot.fed.begin(), slot.fed.end());
    decoding_.erase(std::find(decoding_.begin(), decoding_.end(), slot.id));
  } else if (slot.phase == Phase::Prefill || slot.phase == Phase::Waiting) {
    auto it = std::find(prefilling_.begin(), prefilling_.end(), slot.id);
    if (it == prefilling_.end()) return;  // a choice waiting for choice 0's prompt
    const int64_t b = it - prefilling_.begin();
    prefilling_.erase(it);
    if (next_prefill_ > b) --next_prefill_;  // the turn stays with the same prompt
  }
}

void Scheduler::admit(Slot& s, const std::shared_ptr<Job>& job, int64_t choice) {
  s.job = job;
  s.choice = choice;
  s.phase = Phase::Waiting;
  s.prefilled = s.generated = 0;
  DecodeRule rule;
  rule.sampling = job->sampling;
  rule.max_tokens = job->max_tokens;
  rule.stop = &job->stop;
  rule.stop_at_eos = job->stop_at_eos;
  // Choice 0 draws what `retnet generate` draws for the request alone; choice i, stream i.
  rule.stream = static_cast<uint64_t>(choice);
  if (!job->logit_bias.empty())
    rule.adjust = [bias = job->logit_bias](float* logits, int64_t) {
      for (const auto& [token, b] : bias) logits[token] += b;
    };
  if (job->grammar) {
    if (!trie_) trie_ = std::make_shared<const TokenTrie>(tokenizer_);
    rule.constraint = std::make_shared<GrammarConstraint>(job->grammar, trie_);
  }
  s.decoder = std::make_unique<SequenceDecoder>(tokenizer_, std::move(rule));
  if (job->lookup > 0 || (job->draft_model && options_.draft_model))
    s.draft_length.emplace(job->draft_max);
  s.pending = -1;
  s.draft_fed = 0;  // the draft model's sequence starts over
  s.draft_before.reset();
  s.started = Clock::now();
  s.has_state = false;  // its sequence is about to start over
  if (choice == 0) prefilling_.push_back(s.id);
}

bool Scheduler::sweep_locked() {
  const auto now = Clock::now();
  for (Slot& s : slots_) {
    if (s.phase == Phase::Idle) continue;
    if (s.job->cancelled) {
      if (s.choice == 0) metrics_.cancelled += 1;
      finish(s, FinishReason::None, "the client disconnected", 499);
    } else if (now > s.job->deadline) {
      finish(s, FinishReason::None, "the request ran past the server's --timeout", 504);
    }
  }
  // First come, first served: a job waits until its n choices find n idle slots, and the jobs
  // behind it wait with it (smaller ones do not overtake it, so it is never starved).
  std::vector<Slot*> idle;
  for (Slot& s : slots_)
    if (s.phase == Phase::Idle) idle.push_back(&s);
  size_t taken = 0;
  while (!queue_.empty()) {
    std::shared_ptr<Job> job = queue_.front();
    if (job->cancelled) {  // its client left while it waited: end it without a slot
      queue_.pop_front();
      std::lock_guard<std::mutex> lock(job->mutex);
      job->finished = true;
      job->error = "the client disconnected";
      job->error_status = 499;
      job->changed.notify_all();
      continue;
    }
    if (static_cast<int64_t>(idle.size() - taken) < job->n) break;
    queue_.pop_front();
    for (int64_t c = 0; c < job->n; ++c) admit(*idle[taken++], job, c);
  }
  // Queued jobs whose client left or whose time ran out never take a slot.
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& job = **it;
    if (job.cancelled || now > job.deadline) {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.finished = true;
      job.error = job.cancelled ? "the client disconnected"
                                : "the request waited past the server's --timeout";
      job.error_status = job.cancelled ? 499 : 504;
      job.changed.notify_all();
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  update_gauges_locked();
  return !prefilling_.empty() || !decoding_.empty();
}

void Scheduler::loop() {
  adopt_engine_threads(options_.threads);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!sweep_locked()) {
      // Idle: wake on a new job, or now and then to expire queued ones.
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    lock.unlock();
    // Spinning threads collapse beside other work: one thread while it shares the cores.
    if (options_.threads == 0 && spinning_) cores_shared_ = watch_.shared();
    try {
      std::lock_guard<std::mutex> session_lock(session_mutex_);
      // The regions that take every thread (a long prompt's) take one on shared cores.
      ScopedThreads team(options_.threads == 0 && cores_shared_ ? 1 : 0);
      if (!prefilling_.empty()) prefill_round();
      if (!decoding_.empty()) decode_one_step();
    } catch (const std::exception& e) {
      // An engine error ends every running job with its message; the server stays up.
      lock.lock();
      for (Slot& s : slots_)
        if (s.phase != Phase::Idle)
          finish(s, FinishReason::None, std::string("inference failed: ") + e.what(), 500);
      continue;
    }
    lock.lock();
  }
  for (Slot& s : slots_)
    if (s.phase != Phase::Idle) finish(s, FinishReason::None, stop_reason_, 503);
  for (auto& job : queue_) {
    std::lock_guard<std::mutex> job_lock(job->mutex);
    job->finished = true;
    job->error = stop_reason_;
    job->error_status = 503;
    job->changed.notify_all();
  }
  queue_.clear();
  update_gauges_locked();
}

// The inference thread alone changes slots, so it reads them without the lock; it takes the
// lock to change them, as /slots and save read them from HTTP threads.
//
// One round reads at most one block of prompt tokens in all, shared by the waiting prompts in
// turn: each visit takes one segment of a prompt (up to its next block boundary), and the next
// round starts with the prompt after the last one served. Many short prompts are read in one
// round; a long one cannot hold the others back for more than a block at a time. The round's
// segments are read together in batched passes (by default while a pass is small, see
// SchedulerOptions::prefill_batch_macs; or at most --prefill-batch prompts a pass): one product
// per projection over all their tokens, each prompt's mixers from its own state. Segments
// end at the same boundaries whatever the interleaving and the batching, so every prompt runs the
// chunks it runs alone.
void Scheduler::prefill_round() {
  // Prompts are read with every thread, as before a step chose fewer (one on shared cores).
  if (options_.threads == 0) session_.set_decode_threads(cores_shared_ ? 1 : full_threads_);
  const size_t count = prefilling_.size();
  if (next_prefill_ >= static_cast<int64_t>(count)) next_prefill_ = 0;
  // The prompts in the order this round visits them (reading a group changes prefilling_).
  std::vector<int64_t> order(count);
  for (size_t i = 0; i < count; ++i)
    order[i] = prefilling_[(static_cast<size_t>(next_prefill_) + i) % count];
  std::vector<Slot*> group;
  int64_t used = 0, group_tokens = 0;
  const int64_t parameters = model_.parameter_count();
  auto read_group = [&] {
    prefill_group(group);
    group_tokens = 0;
  };
  size_t served = 0;
  for (; served < count; ++served) {
    Slot& slot = slots_[static_cast<size_t>(order[served])];
    if (slot.phase == Phase::Waiting) {
      // A prompt that starts with the tokens a segment of the group is about to snapshot (the
      // same prompt sent twice, say) waits for that group, and then restores the snapshot rather
      // than reading those tokens again.
      const auto& prompt = slot.job->prompt;
      for (const Slot* member : group) {
        const auto end = static_cast<size_t>(snapshot_end(*member));
        const auto& other = member->job->prompt;
        if (end > 0 && prompt.size() >= end &&
            std::equal(other.begin(), other.begin() + end, prompt.begin())) {
          read_group();
          break;
        }
      }
      start_prefill(slot);
    }
    const int64_t length = next_segment_end(slot) - slot.prefilled;
    if (used > 0 && used + length > block_) break;  // the next round starts with this prompt
    used += length;
    if (!group.empty() && options_.prefill_batch == kPrefillBatchAuto &&
        (group_tokens + length) * parameters > options_.prefill_batch_macs)
      read_group();
    group.push_back(&slot);
    group_tokens += length;
    if (options_.prefill_batch > 0 &&
        static_cast<int64_t>(group.size()) >= options_.prefill_batch)
      read_group();
  }
  read_group();
  // The next round starts with the first prompt not served in this one (or, when all were, with
  // this round's first) that is still being read.
  next_prefill_ = 0;
  for (size_t i = 0; i < count; ++i) {
    const auto it =
        std::find(prefilling_.begin(), prefilling_.end(), order[(served + i) % count]);
    if (it != prefilling_.end()) {
      next_prefill_ = it - prefilling_.begin();
      break;
    }
  }
}

void Scheduler::start_prefill(Slot& slot) {
  Job& job = *slot.job;
  session_.reset_sequence(slot.id);
  int64_t cached = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  if (cache_.capacity_bytes() > 0) {
    if (const SavedSequence* hit = cache_.find_longest_prefix(job.prompt, &cached)) {
      session_.restore(slot.id, *hit);
      metrics_.cache_hits += 1;
      metrics_.cache_tokens_saved += cached;
    } else {
      metrics_.cache_misses += 1;
    }
  }
  slot.phase = Phase::Prefill;
  slot.prefilled = cached;
  std::lock_guard<std::mutex> job_lock(job.mutex);
  job.prompt_tokens = static_cast<int64_t>(job.prompt.size());
  job.cached_tokens = cached;
  job.prompt_started = Clock::now();
}

// Up to the next block boundary; the last segment stops at the last chunk boundary first, where a
// snapshot serves any later prompt that extends this one (the next turn of a chat).
int64_t Scheduler::next_segment_end(const Slot& slot) const {
  const int64_t T = static_cast<int64_t>(slot.job->prompt.size());
  const int64_t last_boundary = T / chunk_ * chunk_;
  int64_t end = std::min(T, (slot.prefilled / block_ + 1) * block_);
  if (end == T && last_boundary > slot.prefilled && last_boundary < T) end = last_boundary;
  return end;
}

int64_t Scheduler::snapshot_end(const Slot& slot) const {
  if (cache_.capacity_bytes() == 0) return 0;
  const int64_t last_boundary = static_cast<int64_t>(slot.job->prompt.size()) / chunk_ * chunk_;
  const int64_t end = next_segment_end(slot);
  const bool at_boundary = end % block_ == 0 || end == last_boundary;
  return end > slot.prefilled && end % chunk_ == 0 && at_boundary ? end : 0;
}

void Scheduler::prefill_group(std::vector<Slot*>& group) {
  if (group.empty()) return;
  const auto t0 = Clock::now();
  group_ids_.clear();
  group_tokens_.clear();
  group_lengths_.clear();
  group_ends_.clear();
  for (const Slot* slot : group) {
    const int64_t end = next_segment_end(*slot);
    group_ids_.push_back(slot->id);
    group_tokens_.push_back(slot->job->prompt.data() + slot->prefilled);
    group_lengths_.push_back(end - slot->prefilled);
    group_ends_.push_back(end);
  }
  session_.prefill(group_ids_, group_tokens_, group_lengths_);
  if (std::any_of(group_lengths_.begin(), group_lengths_.end(), [](int64_t n) { return n > 0; }))
    metrics_.prefill_passes += 1;
  for (size_t i = 0; i < group.size(); ++i) segment_read(*group[i], group_ends_[i]);
  metrics_.prompt_microseconds += micros_since(t0);
  first_tokens(group);
  group.clear();
}

void Scheduler::segment_read(Slot& slot, int64_t end) {
  Job& job = *slot.job;
  const int64_t T = static_cast<int64_t>(job.prompt.size());
  const int64_t start = slot.prefilled;
  metrics_.prefilled_tokens += end - start;
  if (end > start && snapshot_end(slot) == end) {
    SavedSequence snap = session_.snapshot(slot.id);
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.insert(std::vector<int32_t>(job.prompt.begin(), job.prompt.begin() + end),
                  std::move(snap));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  slot.prefilled = slot.position = end;
  slot.state_bytes = session_.state_bytes(slot.id);
  if (end < T) {
    update_gauges_locked();
    return;
  }
  metrics_.prompt_tokens += T;
  {
    std::lock_guard<std::mutex> job_lock(job.mutex);
    job.prompt_done = job.last_token = Clock::now();
  }
  start_choices(slot);
  if (job.max_tokens == 0) {
    finish(slot, FinishReason::Length);  // nothing to generate
    return;
  }
  prefilling_.erase(std::find(prefilling_.begin(), prefilling_.end(), slot.id));
  decoding_.push_back(slot.id);
  slot.phase = Phase::Decode;
  update_gauges_locked();
}

void Scheduler::start_choices(Slot& lead) {
  if (lead.job->n == 1) return;
  for (Slot& s : slots_) {
    if (s.job != lead.job || s.choice == 0) continue;
    if (lead.job->max_tokens == 0) {
      finish(s, FinishReason::Length);
      continue;
    }
    session_.fork(lead.id, s.id);
    s.phase = Phase::Decode;
    s.prefilled = s.position = lead.prefilled;
    s.state_bytes = session_.state_bytes(s.id);
    decoding_.push_back(s.id);
  }
}

TokenLogprob Scheduler::logprob_of(const float* logits, int32_t token, int top) const {
  const int64_t V = session_.vocab();
  float max_logit = logits[0];
  for (int64_t i = 1; i < V; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = token;
  out.logprob = logits[token] - log_z;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[i] = static_cast<int32_t>(i);
    const int64_t k = std::min<int64_t>(top, V);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logits[ids[i]] - log_z);
  }
  return out;
}

// Spinning threads (the engine's policy on free cores) cost little more per parallel region than
// they do in `retnet generate`: a step uses the threads it uses, and the inference thread alone
// once other work shares the cores, where a barrier would wait for a thread that is not running
// (core_watch.h). Threads that sleep at once (the engine's policy on busy cores) pay a wake-up per
// region: a pass too small to be worth splitting (tokens x parameters below 2^23) runs on the
// inference thread alone: one thread is faster for a single default-model stream, two from 4
// streams up (docs/design-notes.md#server-step-threads).
int Scheduler::pass_threads(int64_t tokens) const {
  if (spinning_) return cores_shared_ ? 1 : full_threads_;
  return tokens * model_.parameter_count() >= (int64_t{1} << 23) ? full_threads_ : 1;
}

Scheduler::Chosen Scheduler::choose_next(Slot& slot) {
  Job& job = *slot.job;
  SequenceDecoder::Next step;
  try {
    step = slot.decoder->next(session_, slot.id);
  } catch (const Error& e) {
    if (!job.grammar) throw;
    // A grammar the vocabulary cannot spell on ends its own request, not the batch.
    return {-1, FinishReason::None, std::string("structured output failed: ") + e.what()};
  }
  if (step.finish != FinishReason::Eos) {
    std::optional<TokenLogprob> lp;
    if (job.top_logprobs >= 0)
      lp = logprob_of(session_.logits(slot.id), step.token, job.top_logprobs);
    slot.generated = slot.decoder->generated();
    metrics_.generated_tokens += 1;
    emit(slot, step.text, lp ? &*lp : nullptr);
  }
  return {step.token, step.finish, ""};
}

void Scheduler::first_tokens(const std::vector<Slot*>& group) {
  std::vector<const Job*> jobs;  // taken first: finishing a slot lets go of its job
  for (const Slot* read : group)
    if (read->job && read->phase == Phase::Decode) jobs.push_back(read->job.get());
  for (const Job* job : jobs)
    for (Slot& slot : slots_) {
      if (slot.phase != Phase::Decode || slot.job.get() != job || slot.generated > 0 ||
          slot.pending >= 0)
        continue;
      Chosen chosen = choose_next(slot);
      if (chosen.error.empty() && chosen.finish == FinishReason::None) {
        slot.pending = chosen.token;
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      finish(slot, chosen.finish, chosen.error, chosen.error.empty() ? 0 : 500);
    }
}

void Scheduler::decode_one_step() {
  const auto t0 = Clock::now();
  // Slots fed by the batched step (ids and tokens), and speculating slots' checks (the pending
  // token, then its drafts), each run alone after it.
  std::vector<int64_t> stepping;
  std::vector<int32_t> next;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> checks;
  std::vector<int64_t> ended;  // slot ids that finish this round
  std::vector<FinishReason> reasons;
  std::vector<std::string> errors;  // per ended slot: why its output constraint failed, or ""
  std::vector<int32_t> draft;
  const bool speculate = static_cast<int64_t>(decoding_.size()) <= options_.speculate_max_streams;
  for (const int64_t id : decoding_) {
    Slot& slot = slots_[static_cast<size_t>(id)];
    SequenceDecoder::Next step;
    if (slot.pending >= 0) {  // chosen and emitted already (a check, or the prompt's pass)
      step.token = std::exchange(slot.pending, -1);
    } else {
      Chosen chosen = choose_next(slot);
      if (!chosen.error.empty()) {
        ended.push_back(id);
        reasons.push_back(FinishReason::None);
        errors.push_back(std::move(chosen.error));
        continue;
      }
      step.token = chosen.token;
      step.finish = chosen.finish;
    }
    if (step.finish != FinishReason::None) {  // not fed: the request's text is complete
      ended.push_back(id);
      reasons.push_back(step.finish);
      errors.emplace_back();
      continue;
    }
    draft.clear();
    if (speculate) draft_after(slot, step.token, draft);
    if (draft.empty()) {
      stepping.push_back(id);
      next.push_back(step.token);
      continue;
    }
    draft.insert(draft.begin(), step.token);
    checks.emplace_back(id, draft);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t e = 0; e < ended.size(); ++e)
      finish(slots_[static_cast<size_t>(ended[e])], reasons[e], errors[e],
             errors[e].empty() ? 0 : 500);
  }
  if (!stepping.empty()) {
    if (options_.threads == 0)
      session_.set_decode_threads(pass_threads(static_cast<int64_t>(stepping.size())));
    session_.step(stepping, next.data());
    metrics_.decode_steps += 1;
    if (cores_shared_) metrics_.shared_core_steps += 1;
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t b = 0; b < stepping.size(); ++b) {
      Slot& slot = slots_[static_cast<size_t>(stepping[b])];
      slot.fed.push_back(next[b]);
      slot.position = session_.position(slot.id);
      slot.state_bytes = session_.state_bytes(slot.id);
    }
  }
  for (const auto& [id, checked] : checks) {
    Slot& slot = slots_[static_cast<size_t>(id)];
    FinishReason reason = FinishReason::None;
    std::string error;
    check_drafts(slot, checked, reason, error);
    std::lock_guard<std::mutex> lock(mutex_);
    if (reason != FinishReason::None || !error.empty())
      finish(slot, reason, error, error.empty() ? 0 : 500);
  }
  if (!stepping.empty() || !checks.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    update_gauges_locked();
  }
  metrics_.decode_microseconds += micros_since(t0);
}

}  // namespace retnet::server
