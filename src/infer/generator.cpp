#include "retnet/infer/generator.h"

#include <algorithm>
#include <chrono>

#include "retnet/core/error.h"
#include "retnet/text/utf8.h"

namespace retnet {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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

std::vector<SequenceResult> generate(Session& session, const Tokenizer& tokenizer,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& options, GenerationTimings* timings,
                                     const TextCallback& on_text,
                                     const std::vector<std::string>& text_tails) {
  const int64_t n = static_cast<int64_t>(prompts.size());
  RETNET_CHECK(n >= 1 && n == session.batch(),
               "generate needs one prompt per session sequence ({} prompts, {} sequences)", n,
               session.batch());
  RETNET_CHECK(options.max_tokens >= 0, "max tokens must be >= 0, got {}", options.max_tokens);
  RETNET_CHECK(tokenizer.vocab_size() <= session.vocab(),
               "the tokenizer has {} tokens but the model's vocabulary only {}",
               tokenizer.vocab_size(), session.vocab());
  options.sampling.validate();
  GenerationTimings local;
  GenerationTimings& tm = timings ? *timings : local;
  std::vector<SequenceResult> results(static_cast<size_t>(n));
  std::vector<TextReleaser> releasers;
  for (int64_t i = 0; i < n; ++i)
    releasers.emplace_back(&options.stop,
                           i < static_cast<int64_t>(text_tails.size()) ? text_tails[i] : "");

  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = prompts[i];
    session.prefill(i, p.data(), static_cast<int64_t>(p.size()));
    results[i].prompt_tokens = static_cast<int64_t>(p.size());
    tm.prefill_tokens += static_cast<int64_t>(p.size());
    RETNET_CHECK(session.has_logits(i),
                 "sequence {} has no text to continue: give a prompt or a saved state", i);
  }
  tm.prefill_s += seconds_since(t0);

  // slot -> prompt index of the sequences still decoding, in session order.
  std::vector<int64_t> owner(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) owner[i] = i;
  std::vector<int32_t> next(static_cast<size_t>(n));
  auto emit = [&](int64_t i, const std::string& text) {
    if (text.empty()) return;
    results[i].text += text;
    if (on_text) on_text(i, text);
  };
  auto finish = [&](int64_t i, std::string reason) {
    results[i].finish_reason = std::move(reason);
    emit(i, releasers[i].finish(&results[i].text_tail));
  };
  if (options.max_tokens == 0)
    for (int64_t i = 0; i < n; ++i) finish(i, "length");

  for (int64_t produced = 0; produced < options.max_tokens && !owner.empty(); ++produced) {
    if (options.before_step) options.before_step();
    auto ts = std::chrono::steady_clock::now();
    // Sample every sequence; those that end leave the batch (the last one stays in the session).
    for (int64_t slot = 0; slot < static_cast<int64_t>(owner.size());) {
      const int64_t i = owner[slot];
      const uint64_t stream = i < static_cast<int64_t>(options.streams.size())
                                  ? options.streams[i]
                                  : static_cast<uint64_t>(i);
      const int32_t token = session.sample(slot, options.sampling, stream);
      const char* reason = nullptr;
      if (options.stop_at_eos && token == tokenizer.eos_id()) {
        reason = "eos";
      } else {
        ++results[i].generated_tokens;
        emit(i, releasers[i].push(tokenizer.token_bytes(token)));
        if (releasers[i].stopped())
          reason = "stop";
        else if (results[i].generated_tokens == options.max_tokens)
          reason = "length";
      }
      // A generated token is always fed, so a saved state covers all the text produced.
      next[slot] = token;
      if (reason != nullptr && std::string_view(reason) == "eos") {
        finish(i, reason);
        if (owner.size() > 1) {
          session.remove_sequence(slot);
          owner.erase(owner.begin() + slot);
          std::copy(next.begin() + slot + 1, next.end(), next.begin() + slot);
          continue;
        }
        owner.clear();
        break;
      }
      if (reason != nullptr) {
        results[i].finish_reason = reason;
      }
      ++slot;
    }
    if (owner.empty()) break;
    const int64_t position = session.position(0), batch = static_cast<int64_t>(owner.size());
    session.step(next.data());
    tm.decode_steps += 1;
    tm.decode_tokens += static_cast<int64_t>(owner.size());
    // Sequences that hit a stop string or their length have now consumed their last token.
    for (int64_t slot = static_cast<int64_t>(owner.size()) - 1; slot >= 0; --slot) {
      const int64_t i = owner[slot];
      if (results[i].finish_reason.empty()) continue;
      finish(i, results[i].finish_reason);
      if (owner.size() > 1) {
        session.remove_sequence(slot);
        owner.erase(owner.begin() + slot);
      } else {
        owner.clear();
      }
    }
    const double dt = seconds_since(ts);
    tm.decode_s += dt;
    if (options.record_latency) tm.steps.push_back({position, batch, dt});
  }
  return results;
}

}  // namespace retnet
