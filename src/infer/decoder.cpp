#include "retnet/infer/decoder.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "retnet/core/error.h"
#include "retnet/text/utf8.h"

namespace retnet {

const char* finish_reason_name(FinishReason reason) {
  static const char* const names[] = {"", "stop", "length", "eos"};  // in FinishReason's order
  return names[static_cast<int>(reason)];
}

TextReleaser::TextReleaser(const std::vector<std::string>* stop, std::string initial_bytes)
    : stop_(stop), held_(std::move(initial_bytes)) {}

std::string TextReleaser::push(std::string_view bytes) {
  if (stopped_) return "";
  held_.append(bytes);
  size_t first_stop = std::string::npos;
  if (stop_)
    for (const auto& s : *stop_)
      if (!s.empty()) first_stop = std::min(first_stop, held_.find(s));
  if (first_stop != std::string::npos) {
    stopped_ = true;
    std::string out = utf8_sanitize(std::string_view(held_).substr(0, first_stop));
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is the start of a stop string, and an unfinished character.
  size_t keep = 0;
  if (stop_)
    for (const auto& s : *stop_)
      for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); n > keep; --n)
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
  size_t release = held_.size() - keep;
  release = utf8_complete_prefix(std::string_view(held_).substr(0, release));
  std::string out = utf8_sanitize(std::string_view(held_).substr(0, release));
  held_.erase(0, release);
  return out;
}

std::string TextReleaser::finish(std::string* unfinished_tail) {
  const size_t complete = utf8_complete_prefix(held_);
  std::string out = utf8_sanitize(std::string_view(held_).substr(0, complete));
  std::string tail = held_.substr(complete);
  if (unfinished_tail)
    *unfinished_tail = tail;
  else
    out += utf8_sanitize(tail);
  held_.clear();
  return out;
}

SequenceDecoder::SequenceDecoder(const Tokenizer& tokenizer, DecodeRule rule, std::string text_tail)
    : tokenizer_(tokenizer), rule_(std::move(rule)), releaser_(rule_.stop, std::move(text_tail)) {
  RETNET_CHECK(rule_.max_tokens >= 0, "max tokens must be >= 0, got {}", rule_.max_tokens);
}

// The constraint's mask, with the end-of-sequence token kept (its logit after `adjust`) only where
// the output may end; a state that allows nothing is an Error, never a token outside the mask.
void SequenceDecoder::mask_constrained(int64_t V) {
  const int32_t eos = tokenizer_.eos_id();
  const bool eos_allowed = rule_.stop_at_eos && eos >= 0 && eos < V && rule_.constraint->can_end();
  const float eos_logit = eos_allowed ? adjusted_[static_cast<size_t>(eos)] : 0.f;
  rule_.constraint->mask(adjusted_.data(), V);
  if (eos_allowed) adjusted_[static_cast<size_t>(eos)] = eos_logit;
  const bool any = std::any_of(adjusted_.begin(), adjusted_.end(), [](float z) {
    return z != -std::numeric_limits<float>::infinity();
  });
  RETNET_CHECK(any, "the output constraint allows no next token after {} generated tokens",
               generated_);
}

// Session sequence b's logits with rule_.adjust applied, and the constraint's mask when
// `constrained` (in adjusted_; the session's own logits when neither applies).
const float* SequenceDecoder::adjusted_logits(Session& session, int64_t b, bool constrained) {
  RETNET_CHECK(finish_ == FinishReason::None, "the sequence has ended ({})",
               finish_reason_name(finish_));
  const bool masked = constrained && rule_.constraint;
  if (!rule_.adjust && !masked) return session.logits(b);
  const int64_t V = session.vocab();
  adjusted_.resize(static_cast<size_t>(V));
  std::memcpy(adjusted_.data(), session.logits(b), static_cast<size_t>(V) * sizeof(float));
  if (rule_.adjust) rule_.adjust(adjusted_.data(), V);
  if (masked) mask_constrained(V);
  return adjusted_.data();
}

SequenceDecoder::Next SequenceDecoder::next(Session& session, int64_t b) {
  const float* z = adjusted_logits(session, b, true);
  return take(session.sample_logits(b, z, rule_.sampling, rule_.stream));
}

void SequenceDecoder::distribution(Session& session, int64_t b, float* probs, bool constrained) {
  session.distribution(b, adjusted_logits(session, b, constrained), rule_.sampling, probs);
}

SequenceDecoder::Next SequenceDecoder::take(int32_t token) {
  RETNET_CHECK(finish_ == FinishReason::None, "the sequence has ended ({})",
               finish_reason_name(finish_));
  TokenConstraint* constraint = rule_.constraint.get();
  Next out;
  out.token = token;
  if (rule_.stop_at_eos && out.token == tokenizer_.eos_id()) {
    out.finish = finish_ = FinishReason::Eos;
    return out;
  }
  ++generated_;
  tokens_.push_back(out.token);
  if (constraint) constraint->accept(out.token);
  out.text = releaser_.push(tokenizer_.token_bytes(out.token));
  if (releaser_.stopped() || (constraint && constraint->must_end()))
    out.finish = FinishReason::Stop;
  else if (generated_ >= rule_.max_tokens)
    out.finish = FinishReason::Length;
  finish_ = out.finish;
  return out;
}

}  // namespace retnet
