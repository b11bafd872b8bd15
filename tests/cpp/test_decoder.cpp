// The one decode rule every front end uses (retnet/infer/decoder.h): how a sequence ends (the
// end-of-sequence token, a stop string, its budget), the text it releases, logit adjustments, and
// generate() giving, sequence by sequence, what a loop of SequenceDecoder::next gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/infer/decoder.h"
#include "retnet/infer/generator.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"
#include "retnet/text/utf8.h"

namespace retnet {
namespace {

// Byte-level, with a chosen id as the end-of-sequence token.
class DecoderTestBytes : public Tokenizer {
 public:
  explicit DecoderTestBytes(int32_t eos) : eos_(eos) {}
  std::string kind() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string token_bytes(int32_t id) const override { return std::string(1, char(id)); }
  int32_t eos_id() const override { return eos_; }
  std::string serialize() const override { return ""; }

 private:
  int32_t eos_;
};

Model decoder_test_model() {
  return Model::init(Config::from_json(R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 32,
    "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 32, "decoder_layers": 2,
    "vocab_size": 256})"),
                     4);
}

// Greedy tokens of a session sequence after `prompt`, fed one by one, until a rule ends them.
struct DecodedRun {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::None;
};
DecodedRun decode_alone(const Model& m, const Tokenizer& tok, DecodeRule rule,
                        const std::string& prompt) {
  Session s(m);
  s.add_sequence();
  const std::vector<int32_t> ids = tok.encode(prompt);
  s.prefill(0, ids.data(), static_cast<int64_t>(ids.size()));
  SequenceDecoder d(tok, std::move(rule));
  DecodedRun r;
  while (r.finish == FinishReason::None) {
    const SequenceDecoder::Next n = d.next(s, 0);
    r.tokens.push_back(n.token);
    r.text += n.text;
    r.finish = n.finish;
    if (n.finish == FinishReason::None) s.step(&n.token);
  }
  r.text += d.finish(nullptr);
  return r;
}

// Sampling at `temperature` with `seed`, at most `max_tokens` tokens.
DecodeRule sampled_rule(float temperature, uint64_t seed, int64_t max_tokens) {
  DecodeRule rule;
  rule.sampling.temperature = temperature;
  rule.sampling.seed = seed;
  rule.max_tokens = max_tokens;
  return rule;
}
// Greedy decoding of at most 12 tokens.
DecodeRule greedy_rule() { return sampled_rule(0, 0, 12); }

TEST(Decoder, EndsAtItsBudgetWithTheTextOfEveryToken) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  DecodeRule rule = greedy_rule();
  const DecodedRun r = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.tokens.size(), 12u);
  EXPECT_EQ(std::string(finish_reason_name(r.finish)), "length");
}

TEST(Decoder, TheEndOfSequenceTokenEndsWithoutText) {
  const Model m = decoder_test_model();
  DecoderTestBytes plain(-1);
  DecodeRule rule = greedy_rule();
  const DecodedRun unlimited = decode_alone(m, plain, rule, "abc");
  // The fourth greedy token as the end-of-sequence token: the run ends there, before its text.
  DecoderTestBytes eos(unlimited.tokens[3]);
  const DecodedRun r = decode_alone(m, eos, rule, "abc");
  ASSERT_EQ(r.finish, FinishReason::Eos);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(unlimited.tokens.begin(), unlimited.tokens.begin() + 4));
  EXPECT_EQ(std::string(finish_reason_name(r.finish)), "eos");
  // Ignoring it, the run goes on to its budget.
  rule.stop_at_eos = false;
  EXPECT_EQ(decode_alone(m, eos, rule, "abc").tokens, unlimited.tokens);
}

TEST(Decoder, AStopStringEndsTheTextBeforeIt) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  DecodeRule rule = greedy_rule();
  const DecodedRun unlimited = decode_alone(m, tok, rule, "abc");
  // The bytes of the sixth and seventh tokens (a random model's bytes need not be UTF-8).
  const std::string bytes(unlimited.tokens.begin(), unlimited.tokens.end());
  const std::vector<std::string> stop = {bytes.substr(5, 2)};
  rule.stop = &stop;
  const DecodedRun r = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.text, utf8_sanitize(bytes.substr(0, bytes.find(stop[0]))));
  EXPECT_LE(r.tokens.size(), 7u);
}

TEST(Decoder, AnAdjustmentChangesTheLogitsSampledFrom) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  DecodeRule rule = sampled_rule(0.7f, 3, 6);
  // A bias that only 'z' can win against.
  rule.adjust = [](float* logits, int64_t) { logits[static_cast<int>('z')] += 1000.f; };
  const DecodedRun r = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(r.text, "zzzzzz");
  // Without it the model's own choice (a random model does not pick 'z' six times).
  rule.adjust = nullptr;
  EXPECT_NE(decode_alone(m, tok, rule, "abc").text, "zzzzzz");
}

// Digits only; may end after `can` tokens, must end after `must`.
class DigitsConstraint : public TokenConstraint {
 public:
  DigitsConstraint(int can, int must) : can_(can), must_(must) {}
  void mask(float* logits, int64_t vocab) override {
    for (int64_t t = 0; t < vocab; ++t)
      if (t < '0' || t > '9') logits[t] = -std::numeric_limits<float>::infinity();
  }
  void accept(int32_t token) override {
    RETNET_CHECK(token >= '0' && token <= '9', "token {} is not a digit", token);
    ++taken_;
  }
  bool can_end() const override { return taken_ >= can_; }
  bool must_end() const override { return taken_ >= must_; }

 private:
  int can_, must_, taken_ = 0;
};

TEST(Decoder, AConstraintMasksTokensAndEndsTheSequence) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  DecodeRule rule = sampled_rule(0.9f, 5, 12);
  const DecodedRun free_run = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(free_run.finish, FinishReason::Length);
  EXPECT_FALSE(std::all_of(free_run.text.begin(), free_run.text.end(), ::isdigit));
  rule.constraint = std::make_shared<DigitsConstraint>(2, 4);
  const DecodedRun r = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(r.finish, FinishReason::Stop);
  ASSERT_EQ(r.text.size(), 4u);
  EXPECT_TRUE(std::all_of(r.text.begin(), r.text.end(), ::isdigit)) << r.text;
}

TEST(Decoder, AConstraintAllowsTheEndOfSequenceTokenOnlyWhereItMayEnd) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(255);
  DecodeRule rule = greedy_rule();
  // A bias that makes the end-of-sequence token win wherever it is allowed.
  rule.adjust = [](float* logits, int64_t) { logits[255] += 1000.f; };
  EXPECT_EQ(decode_alone(m, tok, rule, "abc").tokens.size(), 1u);
  rule.constraint = std::make_shared<DigitsConstraint>(3, 8);
  const DecodedRun r = decode_alone(m, tok, rule, "abc");
  EXPECT_EQ(r.finish, FinishReason::Eos);
  EXPECT_EQ(r.tokens.size(), 4u);  // three digits, then the end
  EXPECT_EQ(r.text.size(), 3u);
}

TEST(Decoder, AConstraintThatAllowsNothingIsAnError) {
  struct Nothing : DigitsConstraint {
    Nothing() : DigitsConstraint(1, 1) {}
    void mask(float* logits, int64_t vocab) override {
      std::fill(logits, logits + vocab, -std::numeric_limits<float>::infinity());
    }
  };
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  DecodeRule rule = greedy_rule();
  rule.constraint = std::make_shared<Nothing>();
  EXPECT_THROW(decode_alone(m, tok, rule, "abc"), Error);
}

TEST(Decoder, GenerateIsTheDecoderLoopForEachSequence) {
  const Model m = decoder_test_model();
  DecoderTestBytes tok(-1);
  GenerateOptions options;
  options.max_tokens = 10;
  options.sampling.temperature = 0.9f;
  options.sampling.seed = 11;
  options.sampling.repeat_penalty = 1.2f;
  const std::vector<std::string> prompts = {"The sea", "x"};
  SessionOptions so;
  so.capacity = 2;
  Session s(m, so);
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) {
    s.add_sequence();
    ids.push_back(tok.encode(p));
  }
  const std::vector<SequenceResult> got = generate(s, tok, ids, options);
  for (size_t i = 0; i < prompts.size(); ++i) {
    DecodeRule rule;
    rule.sampling = options.sampling;
    rule.max_tokens = options.max_tokens;
    rule.stream = 0;  // generate's stream of every prompt
    const DecodedRun want = decode_alone(m, tok, rule, prompts[i]);
    EXPECT_EQ(got[i].text, want.text) << prompts[i];
    EXPECT_EQ(got[i].finish_reason, finish_reason_name(want.finish));
    EXPECT_EQ(got[i].generated_tokens, static_cast<int64_t>(want.tokens.size()));
    EXPECT_EQ(got[i].tokens, want.tokens) << prompts[i];
  }
}

}  // namespace
}  // namespace retnet
