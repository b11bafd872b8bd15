#include "retnet/infer/speculative.h"

#include <algorithm>

#include "retnet/core/error.h"
#include "retnet/infer/prompt_lookup.h"
#include "retnet/infer/speculative_rounds.h"

namespace retnet {

void SpeculativeOptions::validate() const {
  RETNET_CHECK(lookup >= 0, "lookup must be >= 0 tokens (0: off), got {}", lookup);
  RETNET_CHECK(draft_max >= 1, "draft max must be >= 1 token, got {}", draft_max);
  RETNET_CHECK(lookup == 0 || draft_model == nullptr,
               "speculative decoding takes prompt lookup or a draft model, not both");
}

DraftLength::DraftLength(int64_t max_draft)
    : max_(std::max<int64_t>(max_draft, 1)), length_(std::min<int64_t>(max_, 4)) {}

int64_t DraftLength::next() {
  if (pause_left_ > 0) {
    --pause_left_;
    return 0;
  }
  return length_;
}

void DraftLength::pause() {
  pause_ = std::min<int64_t>(pause_ ? 2 * pause_ : 4, 64);
  pause_left_ = pause_;
}

void DraftLength::update(int64_t accepted, int64_t drafted, std::optional<double> saved_steps) {
  if (drafted <= 0) return;
  length_ = accepted == drafted ? std::min(max_, 2 * length_) : std::max<int64_t>(1, length_ / 2);
  if (saved_steps) {
    balance_ = std::min(balance_ + *saved_steps, kCredit);
    if (balance_ < 0) {
      pause();
      balance_ = 0;
    } else if (balance_ >= kForgive) {
      pause_ = 0;
    }
    return;
  }
  if (accepted > 0) {
    misses_ = pause_ = 0;
  } else if (++misses_ >= 2) {
    pause();
    misses_ = 0;
  }
}

// speculative_draft.cpp: the loop with a draft model.
void decode_speculative_draft(Session& session, Session& draft, SequenceDecoder& decoder,
                              const GenerateOptions& options, GenerationTimings& tm,
                              const std::function<void(const std::string&)>& emit);

void decode_speculative(Session& session, SequenceDecoder& decoder, std::vector<int32_t> text,
                        const GenerateOptions& options, GenerationTimings& tm,
                        const std::function<void(const std::string&)>& emit,
                        Session* draft_session) {
  RETNET_CHECK(session.batch() == 1, "speculative decoding runs one sequence, the session holds {}",
               session.batch());
  const SpeculativeOptions& so = options.speculative;
  so.validate();
  if (so.draft_model) {
    RETNET_CHECK(draft_session != nullptr,
                 "speculative decoding with a draft model needs its session");
    decode_speculative_draft(session, *draft_session, decoder, options, tm, emit);
    return;
  }
  SpeculativeRounds rounds(so.draft_max, tm);
  std::vector<int32_t> draft, checked;
  auto choose = [&] { return next_emitted(decoder, session, emit); };
  // The pending token: chosen by the rule, not yet fed (end-of-sequence never is).
  SequenceDecoder::Next pending = choose();
  bool done = pending.finish == FinishReason::Eos;
  while (!done) {
    rounds.start(options);
    text.push_back(pending.token);
    const int64_t k = rounds.draft_length(pending, decoder, options.max_tokens);
    draft.clear();
    if (k > 0) prompt_lookup_draft(text, so.lookup, k, draft);
    if (draft.empty()) {
      session.step(&pending.token);
      done = ended_after_plain_step(pending, choose);
      rounds.plain_step_done();
    } else {
      checked.assign(1, pending.token);
      checked.insert(checked.end(), draft.begin(), draft.end());
      session.check(0, checked.data(), static_cast<int64_t>(checked.size()));
      const int64_t drafted = static_cast<int64_t>(draft.size());
      int64_t accepted = 0;
      for (;;) {
        session.accept(0, accepted);  // as after the pending token and the accepted drafts
        pending = choose();
        if (pending.finish == FinishReason::Eos) {
          done = true;
          break;
        }
        if (accepted == drafted || pending.token != draft[accepted]) break;  // the next pending
        text.push_back(pending.token);
        ++accepted;
        if (pending.finish != FinishReason::None) {  // a kept draft ends it: already consumed
          session.accept(0, accepted);
          done = true;
          break;
        }
      }
      rounds.check_done(accepted, drafted);
    }
  }
}

}  // namespace retnet
