#pragma once
// One generating sequence's decode rule, shared by every front end (`retnet generate` and the
// Python package through generate(), the server's scheduler): pick the next token from the
// session's logits (logit adjustments, then the sampling chain: repetition penalty, temperature,
// top-k, top-p), end at the end-of-sequence token, release text (whole UTF-8 characters, never
// a part of a stop string), end at a stop string or the token budget. Front ends keep only what
// is theirs: which sequences step together, and how they report what ended.
#include <cstdint>
#include <functional>
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

  int64_t generated() const { return generated_; }
  FinishReason finish_reason() const { return finish_; }
  // The text held back at the end (with the unfinished character's bytes kept in `tail`, if
  // given, else replaced by U+FFFD).
  std::string finish(std::string* tail) { return releaser_.finish(tail); }

 private:
  const Tokenizer& tokenizer_;
  DecodeRule rule_;
  TextReleaser releaser_;
  int64_t generated_ = 0;
  FinishReason finish_ = FinishReason::None;
  std::vector<float> adjusted_;  // the logits with rule_.adjust applied (sized once)
};

}  // namespace retnet
