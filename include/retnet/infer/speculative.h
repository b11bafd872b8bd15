#pragma once
// Speculative decoding of one sequence with a prompt-lookup drafter. Each round the pending token
// (chosen, not yet fed) and the tokens drafted after it go through one checking pass
// (Session::check); the sequence's decode rule (SequenceDecoder) then picks tokens from the
// checked logits one by one, keeping drafted tokens while they are what it picks, and its own
// pick where they differ becomes the next pending token. The rule is the one plain decoding
// uses, with the same logits, positions and recent tokens, so stop strings, end-of-sequence,
// the budget and finish reasons behave as there, and greedy or seeded sampling gives the same
// text. Sampling stays exact too: for a drafter that proposes one token (q one-hot), taking the
// rule's own draw and keeping the draft only when they agree is the speculative-sampling rule.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "retnet/infer/decoder.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/session.h"

namespace retnet {

// How many tokens to draft: doubles after a round that keeps every drafted token, halves after
// one that does not. Whether to draft at all follows what checks have saved: a caller that times
// its rounds passes each check's saving in plain steps (tokens given less its time over a plain
// step's), summed into a balance (capped at kCredit steps, so a run that paid long ago does not
// pay for misses now); when the balance falls below 0, drafting pauses for 4 plain steps, then 8,
// ... up to 64, and the pauses shorten again once checks have saved kForgive steps. So text that
// does not repeat costs a check's loss per pause at most. Without timings (nullopt) a check that
// keeps nothing is a miss, and two in a row pause drafting the same way.
class DraftLength {
 public:
  static constexpr double kCredit = 8, kForgive = 2;
  explicit DraftLength(int64_t max_draft);
  // Tokens to draft for this step (0: a plain step).
  int64_t next();
  // The outcome of a check of `drafted` tokens of which the first `accepted` were kept;
  // `saved_steps`: plain steps' time it saved (negative: it lost), when the caller measured it.
  void update(int64_t accepted, int64_t drafted, std::optional<double> saved_steps = std::nullopt);

 private:
  void pause();
  int64_t max_, length_, misses_ = 0, pause_ = 0, pause_left_ = 0;
  double balance_ = 0;  // plain steps saved since the last pause
};

// The speculative-sampling rule for a drafted token x drawn from q: keep x with probability
// min(1, p(x) / q(x)) (u_keep in (0, 1) decides), else draw from max(0, p - q) normalised
// (u_draw decides), so the token is distributed as p. p and q: [vocab], each summing to 1.
// `resample_from_p` is the broken rule (rejected tokens drawn from p), for tests to show they
// can tell.
struct SpeculativePick {
  int32_t token;
  bool kept;  // the token is x
};
SpeculativePick speculative_pick(const float* p, const float* q, int64_t vocab, int32_t x,
                                 double u_keep, double u_draw, bool resample_from_p = false);
// The token at which the cumulative probability reaches u x the total (probs: [vocab]).
int32_t draw_token(const float* probs, int64_t vocab, double u);

// Decodes session sequence 0 (the session's only one, its prompt fed) with `decoder` until it
// finishes: `text` holds the tokens the drafter searches (the prompt), generated ones are
// appended. Released text goes to `emit`; drafted and accepted tokens are counted in `timings`.
// With options.speculative.draft_model, `draft` is a session of it holding the same text.
void decode_speculative(Session& session, SequenceDecoder& decoder, std::vector<int32_t> text,
                        const GenerateOptions& options, GenerationTimings& timings,
                        const std::function<void(const std::string&)>& emit,
                        Session* draft = nullptr);

// Decodes every session sequence (prompt i fed to sequence i, decoders[i] its rule) with prompt
// lookup: sequences that find a draft check it in a pass of their own, the others step together.
// `texts[i]` holds prompt i (generated tokens are appended). A finished sequence is handed to
// `finish` (its prompt index) and leaves the batch; the last one stays in the session.
void decode_speculative_batch(Session& session, std::vector<SequenceDecoder>& decoders,
                              std::vector<std::vector<int32_t>> texts,
                              const GenerateOptions& options, GenerationTimings& timings,
                              const std::function<void(int64_t, const std::string&)>& emit,
                              const std::function<void(int64_t)>& finish);

}  // namespace retnet
