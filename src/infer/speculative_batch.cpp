// Speculative decoding of a batch with prompt lookup: each round, every sequence's pending token
// is chosen; those that find a draft check it with their drafts in a pass of their own
// (Session::check), the others advance together in one batched step. Each sequence's decode rule
// picks from its logits as in plain decoding, so every prompt gets its plain text.
#include <algorithm>
#include <chrono>

#include "retnet/core/error.h"
#include "retnet/infer/prompt_lookup.h"
#include "retnet/infer/speculative.h"

namespace retnet {

void decode_speculative_batch(Session& session, std::vector<SequenceDecoder>& decoders,
                              std::vector<std::vector<int32_t>> texts,
                              const GenerateOptions& options, GenerationTimings& tm,
                              const std::function<void(int64_t, const std::string&)>& emit,
                              const std::function<void(int64_t)>& finish) {
  const int64_t n = static_cast<int64_t>(decoders.size());
  RETNET_CHECK(session.batch() == n && static_cast<int64_t>(texts.size()) == n,
               "a speculative batch needs one decoder and text per sequence");
  RETNET_CHECK(options.speculative.draft_model == nullptr,
               "a draft model decodes one sequence at a time, got {} prompts", n);
  std::vector<int64_t> owner(static_cast<size_t>(n));  // session index -> prompt index
  for (int64_t i = 0; i < n; ++i) owner[i] = i;
  // The token each sequence's rule chose and no step has fed yet (after a check), if any.
  std::vector<SequenceDecoder::Next> pending(static_cast<size_t>(n));
  std::vector<uint8_t> has_pending(static_cast<size_t>(n), 0), done(static_cast<size_t>(n), 0);
  std::vector<DraftLength> lengths(static_cast<size_t>(n),
                                   DraftLength(options.speculative.draft_max));
  std::vector<int64_t> rows;
  std::vector<int32_t> tokens, draft, checked;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> checks;
  auto choose = [&](int64_t i, int64_t b) {
    SequenceDecoder::Next next = decoders[i].next(session, b);
    emit(i, next.text);
    return next;
  };
  while (!owner.empty()) {
    if (options.before_step) options.before_step();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t position = session.position(0), batch = static_cast<int64_t>(owner.size());
    rows.clear();
    tokens.clear();
    checks.clear();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t i = owner[b];
      SequenceDecoder::Next step = has_pending[i] ? pending[i] : choose(i, b);
      has_pending[i] = 0;
      if (step.finish == FinishReason::Eos) {  // not fed: the text ends before it
        done[i] = 1;
        continue;
      }
      texts[i].push_back(step.token);
      // A token that ends the text is fed (a saved state covers all the text), with no drafts.
      if (step.finish != FinishReason::None) done[i] = 1;
      const int64_t k =
          step.finish != FinishReason::None
              ? 0
              : std::min(lengths[i].next(), options.max_tokens - decoders[i].generated());
      draft.clear();
      if (k > 0) prompt_lookup_draft(texts[i], options.speculative.lookup, k, draft);
      if (draft.empty()) {
        rows.push_back(b);
        tokens.push_back(step.token);
        continue;
      }
      draft.insert(draft.begin(), step.token);
      checks.emplace_back(b, draft);
    }
    if (!rows.empty()) {
      session.step(rows, tokens.data());
      tm.decode_steps += 1;
      tm.decode_tokens += static_cast<int64_t>(rows.size());
    }
    for (const auto& [b, check] : checks) {
      const int64_t i = owner[b], drafted = static_cast<int64_t>(check.size()) - 1;
      session.check(b, check.data(), drafted + 1);
      int64_t accepted = 0;
      for (;;) {
        session.accept(b, accepted);  // as after the pending token and the kept drafts
        SequenceDecoder::Next next = choose(i, b);
        if (next.finish == FinishReason::Eos) {
          done[i] = 1;
          break;
        }
        if (accepted == drafted || next.token != check[static_cast<size_t>(accepted + 1)]) {
          pending[i] = next;  // fed next round
          has_pending[i] = 1;
          break;
        }
        texts[i].push_back(next.token);
        ++accepted;
        if (next.finish != FinishReason::None) {  // a kept draft ends it: already consumed
          session.accept(b, accepted);
          done[i] = 1;
          break;
        }
      }
      lengths[i].update(accepted, drafted);
      tm.decode_steps += 1;
      tm.decode_tokens += accepted + 1;
      tm.checks += 1;
      tm.drafted_tokens += drafted;
      tm.accepted_tokens += accepted;
    }
    // Finished sequences leave the batch (the last one stays in the session), latest first.
    for (int64_t b = batch - 1; b >= 0; --b) {
      const int64_t i = owner[b];
      if (!done[i]) continue;
      finish(i);
      if (owner.size() > 1) session.remove_sequence(b);
      owner.erase(owner.begin() + b);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tm.decode_s += dt;
    if (options.record_latency) tm.steps.push_back({position, batch, dt});
  }
}

}  // namespace retnet
