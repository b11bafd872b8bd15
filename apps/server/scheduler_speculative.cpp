// The scheduler's speculative decoding with prompt lookup or a draft model: a speculating slot's
// pending token and the tokens drafted after it are checked in one pass of that slot alone
// (Session::check) beside the batched step of the other slots, and its decode rule picks from the
// checked logits one by one, as it picks after plain steps, so the text is the one plain decoding
// gives. A draft model's drafts are kept by that rule too (not `retnet generate`'s
// speculative-sampling rule): a sampled request's text stays the plain one for its seed.
#include <algorithm>

#include "retnet/infer/draft_model.h"
#include "retnet/infer/prompt_lookup.h"
#include "scheduler.h"

namespace retnet::server {

void Scheduler::draft_after(Slot& slot, int32_t pending, std::vector<int32_t>& draft) {
  draft.clear();
  if (!slot.draft_length) return;
  const Job& job = *slot.job;
  // No more than the budget leaves: the rule would cut the rest anyway.
  const int64_t k = std::min(slot.draft_length->next(), job.max_tokens - slot.generated);
  if (k <= 0) return;
  lookup_text_.assign(job.prompt.begin(), job.prompt.end());
  lookup_text_.insert(lookup_text_.end(), slot.fed.begin(), slot.fed.end());
  if (job.lookup == 0) {
    draft_with_model(slot, pending, k, draft);
    return;
  }
  lookup_text_.push_back(pending);
  prompt_lookup_draft(lookup_text_, job.lookup, k, draft);
}

void Scheduler::draft_with_model(Slot& slot, int32_t pending, int64_t k,
                                 std::vector<int32_t>& draft) {
  if (!draft_session_) {
    SessionOptions so;
    so.capacity = static_cast<int64_t>(slots_.size());
    so.prefill_block = block_;
    so.history = std::max<int64_t>(options_.history, 1);  // the repetition penalty's
    so.decode_threads = std::max(options_.threads, 0);
    so.watch_cores = false;  // the scheduler watches the cores
    draft_session_ = std::make_unique<Session>(*options_.draft_model, so);
    for (size_t i = 0; i < slots_.size(); ++i) draft_session_->add_sequence();
  }
  // The draft's sequence catches up with the text (lookup_text_: prompt and fed tokens) it has
  // not read: the whole prompt at a stream's first draft, then what plain steps and checks fed.
  const int64_t have = static_cast<int64_t>(lookup_text_.size());
  if (slot.draft_fed == 0) draft_session_->reset_sequence(slot.id);
  if (slot.draft_fed < have)
    draft_session_->prefill(slot.id, lookup_text_.data() + slot.draft_fed, have - slot.draft_fed);
  slot.draft_fed = have;
  const Job& job = *slot.job;
  slot.draft_before =
      draft_ahead(*draft_session_, slot.id, *slot.decoder, pending, k, job.sampling.seed,
                  static_cast<uint64_t>(slot.choice), draft_checked_, draft_q_);
  draft.assign(draft_checked_.begin() + 1, draft_checked_.end());
}

void Scheduler::check_drafts(Slot& slot, const std::vector<int32_t>& checked, FinishReason& reason,
                             std::string& error) {
  Job& job = *slot.job;
  const int64_t n = static_cast<int64_t>(checked.size()), drafted = n - 1;
  // As a step's threads (pass_threads).
  if (options_.threads == 0) session_.set_decode_threads(pass_threads(n));
  session_.check(slot.id, checked.data(), n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot.fed.push_back(checked[0]);
  }
  int64_t accepted = 0;
  for (;;) {
    session_.accept(slot.id, accepted);  // as after the pending token and the kept drafts
    Chosen pick = choose_next(slot);
    if (!pick.error.empty()) {
      error = std::move(pick.error);
      break;
    }
    // A pick that ends the stream is not fed, as after a plain step: the state stays after the
    // tokens kept so far, which `fed` lists.
    if (pick.finish != FinishReason::None) {
      reason = pick.finish;
      break;
    }
    if (accepted < drafted && pick.token == checked[static_cast<size_t>(accepted + 1)]) {
      ++accepted;
      std::lock_guard<std::mutex> lock(mutex_);
      slot.fed.push_back(pick.token);
      continue;
    }
    slot.pending = pick.token;  // fed by the next step (or the next check)
    break;
  }
  if (slot.draft_before) {  // the draft model's sequence: back to the pending token and the kept
    draft_keep(*draft_session_, slot.id, *slot.draft_before, checked, accepted);
    slot.draft_before.reset();
    slot.draft_fed += 1 + std::min(accepted, drafted - 1);
  }
  slot.draft_length->update(accepted, drafted);
  metrics_.speculative_checks += 1;
  metrics_.drafted_tokens += drafted;
  metrics_.accepted_tokens += accepted;
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    ChoiceOutput& out = job.choices[static_cast<size_t>(slot.choice)];
    out.checks += 1;
    out.drafted_tokens += drafted;
    out.accepted_tokens += accepted;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  slot.position = session_.position(slot.id);
  slot.state_bytes = session_.state_bytes(slot.id);
}

}  // namespace retnet::server
