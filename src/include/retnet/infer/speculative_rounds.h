#pragma once
// The bookkeeping both speculative loops (prompt lookup, draft model) share: each round's clock,
// a plain step's seconds as a moving average (a check saves the plain steps' time of the tokens it
// gives less its own), the draft length that adapts to both, and the timings a round adds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "retnet/infer/decoder.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/speculative.h"

namespace retnet {

// The decoder's next token for the session's one sequence, its text emitted.
inline SequenceDecoder::Next next_emitted(SequenceDecoder& decoder, Session& session,
                                          const std::function<void(const std::string&)>& emit) {
  SequenceDecoder::Next next = decoder.next(session, 0);
  emit(next.text);
  return next;
}

// After a plain step fed `pending`: a stop string or the budget ends the sequence with that
// token; otherwise the next one is chosen, and end-of-sequence ends it unfed. True: it ended.
template <typename Choose>
bool ended_after_plain_step(SequenceDecoder::Next& pending, Choose&& choose) {
  if (pending.finish != FinishReason::None) return true;
  pending = choose();
  return pending.finish == FinishReason::Eos;
}

class SpeculativeRounds {
 public:
  SpeculativeRounds(int64_t draft_max, GenerationTimings& timings)
      : length_(draft_max), tm_(timings) {}

  // Starts a round, after the caller's hook between steps (an interrupt check, a progress line).
  void start(const GenerateOptions& options) {
    if (options.before_step) options.before_step();
    t0_ = std::chrono::steady_clock::now();
  }
  // Tokens to draft for this round (0: a plain step): none once the pending token ends the
  // sequence, and no more than its budget leaves (the rule would cut them anyway).
  int64_t draft_length(const SequenceDecoder::Next& pending, const SequenceDecoder& decoder,
                       int64_t max_tokens) {
    if (pending.finish != FinishReason::None) return 0;
    return std::min(length_.next(), max_tokens - decoder.generated());
  }
  // The round was one plain step.
  void plain_step_done() {
    const double dt = elapsed();
    step_s_ = step_s_ > 0 ? 0.8 * step_s_ + 0.2 * dt : dt;
    tm_.decode_steps += 1;
    tm_.decode_tokens += 1;
    tm_.decode_s += dt;
  }
  // The round checked `drafted` tokens and kept the first `accepted`, plus the target's own.
  void check_done(int64_t accepted, int64_t drafted) {
    const double dt = elapsed();
    length_.update(accepted, drafted,
                   step_s_ > 0 ? std::optional<double>(accepted + 1 - dt / step_s_) : std::nullopt);
    tm_.decode_steps += 1;
    tm_.decode_tokens += accepted + 1;
    tm_.checks += 1;
    tm_.drafted_tokens += drafted;
    tm_.accepted_tokens += accepted;
    tm_.decode_s += dt;
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  DraftLength length_;
  GenerationTimings& tm_;
  double step_s_ = 0;  // 0: no plain step yet
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace retnet
