// Speculative decoding with a draft model: the draft samples k tokens ahead from q (its own
// logits through the same adjustments and sampling chain), one checking pass of the target gives
// p for each, and the speculative-sampling rule keeps or replaces them.
#include <algorithm>

#include <fmt/format.h>

#include "retnet/core/error.h"
#include "retnet/core/rng.h"
#include "retnet/infer/draft_model.h"
#include "retnet/infer/speculative.h"
#include "retnet/infer/speculative_rounds.h"

namespace retnet {

void check_draft_matches(const Model& draft, const Tokenizer& draft_tokenizer,
                         const std::string& draft_name, const Model& target,
                         const Tokenizer& target_tokenizer, const std::string& target_name) {
  RETNET_CHECK(draft.config().vocab_size == target.config().vocab_size,
               "{} has a vocabulary of {} tokens, {} {}", draft_name, draft.config().vocab_size,
               target_name, target.config().vocab_size);
  RETNET_CHECK(draft_tokenizer.serialize() == target_tokenizer.serialize(),
               "{} has another tokenizer ({}) than {} ({}): drafts must be the model's tokens",
               draft_name, draft_tokenizer.kind(), target_name, target_tokenizer.kind());
}

Model load_draft_model(const std::string& path, DecodePrecision precision, bool in_place,
                       const Model& target, const Tokenizer& target_tokenizer,
                       const std::string& target_path) {
  Model draft = load_model_for_inference(path, std::nullopt, precision, nullptr, in_place);
  check_draft_matches(draft, *load_model_tokenizer(path), fmt::format("--draft-model '{}'", path),
                      target, target_tokenizer, fmt::format("the model '{}'", target_path));
  return draft;
}


namespace {

// Random streams of the draft's draws and the rule's two, apart from the sampler's own.
constexpr uint64_t kDraftStream = 0x5a3b1e10000000ull, kKeepStream = 0x5a3b1e20000000ull,
                   kResampleStream = 0x5a3b1e30000000ull;

}  // namespace

int32_t draw_token(const float* probs, int64_t vocab, double u) {
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += probs[i];
  const double target = u * total;
  double cum = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (cum >= target) return last;
  }
  return last;
}

SpeculativePick speculative_pick(const float* p, const float* q, int64_t vocab, int32_t x,
                                 double u_keep, double u_draw, bool resample_from_p) {
  RETNET_CHECK(x >= 0 && x < vocab, "drafted token {} is outside the vocabulary of {}", x, vocab);
  const double px = p[x], qx = q[x];
  if (px >= qx || u_keep * qx < px) return {x, true};
  if (resample_from_p) return {draw_token(p, vocab, u_draw), false};
  double residual_total = 0;
  for (int64_t i = 0; i < vocab; ++i) residual_total += std::max(0.0, double(p[i]) - q[i]);
  // p == q up to rounding leaves no residual; p itself is then the distribution to draw from.
  if (!(residual_total > 0)) return {draw_token(p, vocab, u_draw), false};
  const double target = u_draw * residual_total;
  double cum = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double r = std::max(0.0, double(p[i]) - q[i]);
    if (r <= 0) continue;
    cum += r;
    last = static_cast<int32_t>(i);
    if (cum >= target) break;
  }
  return {last, false};
}

SavedSequence draft_ahead(Session& draft, int64_t seq, SequenceDecoder& decoder, int32_t pending,
                          int64_t k, uint64_t seed, uint64_t stream, std::vector<int32_t>& checked,
                          std::vector<float>& q) {
  RETNET_CHECK(k >= 1, "a draft needs at least one token, got {}", k);
  const int64_t V = draft.vocab();
  const Philox rng(seed);
  SavedSequence before = draft.snapshot(seq);
  q.resize(static_cast<size_t>(k * V));
  checked.assign(1, pending);
  const int64_t row[1] = {seq};
  draft.step(row, &pending);
  for (int64_t i = 0; i < k; ++i) {
    float* qi = q.data() + i * V;
    decoder.distribution(draft, seq, qi, /*constrained=*/false);
    const int32_t x = draw_token(
        qi, V, rng.uniform(kDraftStream + stream, static_cast<uint64_t>(draft.position(seq))));
    checked.push_back(x);
    if (i + 1 < k) draft.step(row, &x);
  }
  return before;
}

void draft_keep(Session& draft, int64_t seq, const SavedSequence& before,
                const std::vector<int32_t>& checked, int64_t accepted) {
  const int64_t k = static_cast<int64_t>(checked.size()) - 1;
  if (accepted >= k - 1) return;  // it holds the pending token and the first k - 1: all kept
  draft.truncate(seq, before);
  draft.prefill(seq, checked.data(), accepted + 1);
}

void decode_speculative_draft(Session& session, Session& draft, SequenceDecoder& decoder,
                              const GenerateOptions& options, GenerationTimings& tm,
                              const std::function<void(const std::string&)>& emit) {
  RETNET_CHECK(draft.batch() == 1 && draft.position(0) == session.position(0),
               "the draft session must hold the target's text ({} tokens), it holds {}",
               session.position(0), draft.batch() ? draft.position(0) : 0);
  RETNET_CHECK(draft.vocab() == session.vocab(),
               "the draft model has {} tokens in its vocabulary, the model {}", draft.vocab(),
               session.vocab());
  const int64_t V = session.vocab();
  const Philox rng(options.sampling.seed);  // the rule's draws (the draft's: draft_ahead)
  const uint64_t stream = options.streams.empty() ? 0 : options.streams[0];
  SpeculativeRounds rounds(options.speculative.draft_max, tm);
  std::vector<int32_t> checked;
  std::vector<float> p(static_cast<size_t>(V)), q;
  auto choose = [&] { return next_emitted(decoder, session, emit); };
  SequenceDecoder::Next pending = choose();
  bool done = pending.finish == FinishReason::Eos;
  while (!done) {
    rounds.start(options);
    const int64_t k = rounds.draft_length(pending, decoder, options.max_tokens);
    if (k <= 0) {
      session.step(&pending.token);
      draft.step(&pending.token);
      done = ended_after_plain_step(pending, choose);
      rounds.plain_step_done();
      continue;
    }
    const SavedSequence before =
        draft_ahead(draft, 0, decoder, pending.token, k, options.sampling.seed, stream, checked, q);
    session.check(0, checked.data(), k + 1);
    int64_t accepted = 0;
    for (;;) {
      session.accept(0, accepted);  // as after the pending token and the accepted drafts
      if (accepted == k) {          // every draft kept: the target's own next token
        pending = choose();
        done = pending.finish == FinishReason::Eos;
        break;
      }
      decoder.distribution(session, 0, p.data());
      const auto position = static_cast<uint64_t>(session.position(0));
      const SpeculativePick pick = speculative_pick(
          p.data(), q.data() + accepted * V, V, checked[accepted + 1],
          rng.uniform(kKeepStream + stream, position),
          rng.uniform(kResampleStream + stream, position), options.speculative.resample_from_p);
      SequenceDecoder::Next next = decoder.take(pick.token);
      emit(next.text);
      if (next.finish == FinishReason::Eos) {
        done = true;
        break;
      }
      if (!pick.kept) {
        pending = next;
        break;
      }
      ++accepted;
      if (next.finish != FinishReason::None) {  // a kept draft ends it: already consumed
        session.accept(0, accepted);
        done = true;
        break;
      }
    }
    draft_keep(draft, 0, before, checked, accepted);
    if (accepted == k) draft.step(&checked[k]);  // level with the target
    rounds.check_done(accepted, k);
  }
}

}  // namespace retnet
