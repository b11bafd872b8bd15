#include "retnet/infer/speculative.h"

#include <algorithm>
#include <chrono>

#include "retnet/core/error.h"
#include "retnet/infer/prompt_lookup.h"

namespace retnet {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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

void DraftLength::update(int64_t accepted, int64_t drafted, bool paid_off) {
  if (drafted <= 0) return;
  length_ = accepted == drafted ? std::min(max_, 2 * length_) : std::max<int64_t>(1, length_ / 2);
  if (accepted > 0 && paid_off) {
    misses_ = pause_ = 0;
  } else if (++misses_ >= 2) {
    pause_ = std::min<int64_t>(pause_ ? 2 * pause_ : 4, 64);
    pause_left_ = pause_;
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
  DraftLength length(so.draft_max);
  std::vector<int32_t> draft, checked;
  // Seconds of a plain step with its pick (a moving average; 0: none yet): a check pays off when
  // its round takes less than plain steps would for the tokens it gives.
  double step_s = 0;
  auto choose = [&] {
    SequenceDecoder::Next next = decoder.next(session, 0);
    emit(next.text);
    return next;
  };
  // The pending token: chosen by the rule, not yet fed (end-of-sequence never is).
  SequenceDecoder::Next pending = choose();
  bool done = pending.finish == FinishReason::Eos;
  while (!done) {
    if (options.before_step) options.before_step();
    const auto t0 = std::chrono::steady_clock::now();
    text.push_back(pending.token);
    // Drafts past the budget would be cut by the rule anyway; a finished sequence drafts none.
    const int64_t room = options.max_tokens - decoder.generated();
    const int64_t k = pending.finish == FinishReason::None ? std::min(length.next(), room) : 0;
    draft.clear();
    if (k > 0) prompt_lookup_draft(text, so.lookup, k, draft);
    if (draft.empty()) {
      session.step(&pending.token);
      tm.decode_steps += 1;
      tm.decode_tokens += 1;
      // A stop string or the budget ends the sequence after its last token is fed.
      done = pending.finish != FinishReason::None;
      if (!done) {
        pending = choose();
        done = pending.finish == FinishReason::Eos;
      }
      const double dt = seconds_since(t0);
      step_s = step_s > 0 ? 0.8 * step_s + 0.2 * dt : dt;
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
      length.update(accepted, drafted, step_s == 0 || seconds_since(t0) < (accepted + 1) * step_s);
      tm.decode_steps += 1;
      tm.decode_tokens += accepted + 1;
      tm.checks += 1;
      tm.drafted_tokens += drafted;
      tm.accepted_tokens += accepted;
    }
    tm.decode_s += seconds_since(t0);
  }
}

}  // namespace retnet
