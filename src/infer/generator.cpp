#include "retnet/infer/generator.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "retnet/core/error.h"
#include "retnet/infer/grammar.h"
#include "retnet/infer/speculative.h"

namespace retnet {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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
  GenerationTimings local;
  GenerationTimings& tm = timings ? *timings : local;
  options.sampling.validate();
  options.speculative.validate();
  RETNET_CHECK(options.speculative.draft_model == nullptr || n == 1,
               "speculative decoding with a draft model decodes one sequence at a time, got {} "
               "prompts",
               n);
  RETNET_CHECK(!options.speculative.enabled() || !options.grammar,
               "speculative decoding does not take a grammar (constrained output)");
  // The vocabulary's bytes as a trie, walked by each sequence's grammar mask.
  std::shared_ptr<const TokenTrie> trie = options.grammar ? options.trie : nullptr;
  if (options.grammar && !trie) trie = std::make_shared<const TokenTrie>(tokenizer);
  RETNET_CHECK(!trie || trie->vocab() == tokenizer.vocab_size(),
               "the grammar's token trie has {} tokens, the tokenizer {}",
               trie ? trie->vocab() : 0, tokenizer.vocab_size());
  std::vector<SequenceResult> results(static_cast<size_t>(n));
  std::vector<SequenceDecoder> decoders;
  decoders.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    DecodeRule rule;
    rule.sampling = options.sampling;
    rule.max_tokens = options.max_tokens;
    rule.stop = &options.stop;
    rule.stop_at_eos = options.stop_at_eos;
    rule.stream = i < static_cast<int64_t>(options.streams.size()) ? options.streams[i] : 0;
    if (options.grammar) rule.constraint = std::make_shared<GrammarConstraint>(options.grammar, trie);
    decoders.emplace_back(tokenizer, std::move(rule),
                          i < static_cast<int64_t>(text_tails.size()) ? text_tails[i] : "");
  }

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
  auto finish = [&](int64_t i, FinishReason reason) {
    results[i].finish_reason = finish_reason_name(reason);
    results[i].tokens = decoders[i].tokens();
    emit(i, decoders[i].finish(&results[i].text_tail));
  };
  if (options.max_tokens == 0)
    for (int64_t i = 0; i < n; ++i) finish(i, FinishReason::Length);
  if (options.speculative.enabled() && options.max_tokens > 0 && n > 1) {
    decode_speculative_batch(session, decoders, prompts, options, tm, emit, [&](int64_t i) {
      results[i].generated_tokens = decoders[i].generated();
      finish(i, decoders[i].finish_reason());
    });
    return results;
  }
  if (options.speculative.enabled() && options.max_tokens > 0) {
    std::unique_ptr<Session> draft;
    if (const Model* draft_model = options.speculative.draft_model) {
      RETNET_CHECK(session.position(0) == results[0].prompt_tokens,
                   "a draft model needs the whole text as the prompt, not a saved state");
      const auto td = std::chrono::steady_clock::now();
      draft = std::make_unique<Session>(*draft_model);
      draft->add_sequence();
      draft->prefill(0, prompts[0].data(), static_cast<int64_t>(prompts[0].size()));
      tm.prefill_s += seconds_since(td);
    }
    decode_speculative(
        session, decoders[0], prompts[0], options, tm,
        [&](const std::string& text) { emit(0, text); }, draft.get());
    results[0].generated_tokens = decoders[0].generated();
    finish(0, decoders[0].finish_reason());
    return results;
  }

  for (int64_t produced = 0; produced < options.max_tokens && !owner.empty(); ++produced) {
    if (options.before_step) options.before_step();
    auto ts = std::chrono::steady_clock::now();
    // Sample every sequence; those that end leave the batch (the last one stays in the session).
    for (int64_t slot = 0; slot < static_cast<int64_t>(owner.size());) {
      const int64_t i = owner[slot];
      const SequenceDecoder::Next step = decoders[i].next(session, slot);
      if (step.finish == FinishReason::Eos) {  // not fed: the text ends before it
        finish(i, step.finish);
        if (owner.size() > 1) {
          session.remove_sequence(slot);
          owner.erase(owner.begin() + slot);
          std::copy(next.begin() + slot + 1, next.end(), next.begin() + slot);
          continue;
        }
        owner.clear();
        break;
      }
      results[i].generated_tokens = decoders[i].generated();
      emit(i, step.text);
      // A generated token is always fed, so a saved state covers all the text produced.
      next[slot] = step.token;
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
      if (decoders[i].finish_reason() == FinishReason::None) continue;
      finish(i, decoders[i].finish_reason());
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
