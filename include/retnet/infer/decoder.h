#pragma once
// One generating sequence's decode rule, shared by every front end (`retnet generate` and the
// Python package through generate(), the server's scheduler): pick the next token from the
// session's logits (logit adjustments, then the sampling chain: repetition penalty, temperature,
// top-k, top-p), end at the end-of-sequence token, release text (whole UTF-8 characters, never
// a part of a stop string), end at a stop string or the token budget. Front ends keep only what
// is theirs: which sequences step together, and how they report what ended.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/infer/sampler.h"
#include "retnet/infer/session.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

// Why a sequence ended: a stop string, its token budget, or the end-of-sequence token.
enum class FinishReason { None, Stop, Length, Eos };
// "stop", "length", "eos" ("" for None): the names `retnet generate` prints.
const char* finish_reason_name(FinishReason reason);

// Adds to (or masks) a copy of the logits before sampling: logit biases, constrained output.
using LogitAdjust = std::function<void(float* logits, int64_t vocab)>;

// A stateful limit on which tokens may come next (a grammar, a JSON schema): the decoder masks
// the rest before sampling, reports the chosen token, and ends the sequence with Stop when the
// output is complete. One instance per sequence.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of tokens that may not come next to -infinity (the end-of-sequence token
  // included: the decoder allows it itself when can_end()).
  virtual void mask(float* logits, int64_t vocab) = 0;
  // Moves past the chosen token; an Error if the token was not allowed.
  virtual void accept(int32_t token) = 0;
  // The output so far is complete (the end-of-sequence token may come next).
  virtual bool can_end() const = 0;
  // The output is complete and nothing may follow: the sequence ends here.
  virtual bool must_end() const = 0;
};

// The streaming rule on its own: bytes in, releasable text out.
class TextReleaser {
 public:
  TextReleaser(const std::vector<std::string>* stop, std::string initial_bytes = "");
  // Adds bytes; returns text now safe to release. Sets stopped() when a stop string appears.
  std::string push(std::string_view bytes);
  bool stopped() const { return stopped_; }
  // What is left at the end: released text, and the unfinished character tail kept aside.
  std::string finish(std::string* unfinished_tail);

 private:
  const std::vector<std::string>* stop_;
  std::string held_;
  bool stopped_ = false;
};

struct DecodeRule {
  SamplingParams sampling;   // checked by the front end (its own limits, its own error)
  int64_t max_tokens = 128;  // tokens to generate (the budget)
  const std::vector<std::string>* stop = nullptr;  // stop strings (not owned; may be null)
  bool stop_at_eos = true;
  uint64_t stream = 0;  // keys the random draws with the seed and the position
  LogitAdjust adjust;   // empty: the logits as they are
  // Applied after `adjust`; null: every token may come next. Shared so a rule stays copyable;
  // one sequence uses it at a time.
  std::shared_ptr<TokenConstraint> constraint;
};

class SequenceDecoder {
 public:
  // `text_tail`: bytes of an unfinished UTF-8 character left by an earlier run (a state file).
  SequenceDecoder(const Tokenizer& tokenizer, DecodeRule rule, std::string text_tail = "");

  struct Next {
    int32_t token = 0;
    std::string text;  // text released by this token (often empty: held back)
    FinishReason finish = FinishReason::None;
  };
  // The next token of session sequence b. Eos: the token is not part of the text and the
  // sequence ends without consuming it; Stop and Length: the token is the last one generated.
  Next next(Session& session, int64_t b);
  // What next() draws from for session sequence b ([vocab] into probs): the logits adjusted, and
  // masked by the constraint when `constrained`, then the sampling chain.
  void distribution(Session& session, int64_t b, float* probs, bool constrained = true);
  // Moves past `token` chosen by the caller from distribution() (speculative sampling), as
  // next() does past its own pick.
  Next take(int32_t token);

  int64_t generated() const { return generated_; }
  // The ids generated so far (an end-of-sequence token that ended the text is not one).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  FinishReason finish_reason() const { return finish_; }
  // The text held back at the end (with the unfinished character's bytes kept in `tail`, if
  // given, else replaced by U+FFFD).
  std::string finish(std::string* tail) { return releaser_.finish(tail); }

 private:
  const Tokenizer& tokenizer_;
  DecodeRule rule_;
  TextReleaser releaser_;
  int64_t generated_ = 0;
  std::vector<int32_t> tokens_;
  FinishReason finish_ = FinishReason::None;
  void mask_constrained(int64_t vocab);  // rule_.constraint's mask on adjusted_
  const float* adjusted_logits(Session& session, int64_t b, bool constrained);

  std::vector<float> adjusted_;  // the logits with rule_.adjust applied (sized once)
};

}  // namespace retnet
