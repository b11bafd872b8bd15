// Speculative decoding with prompt lookup: for every mixer and a hybrid model, the text, token
// count and finish reason are those of plain decoding (greedy and seeded sampling, with a stop
// string, the budget and the end-of-sequence token ending it), drafts are kept where the text
// repeats, and the drafter and the draft length follow their rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/prompt_lookup.h"
#include "retnet/infer/speculative.h"
#include "retnet/model/model.h"
#include "retnet/model/model_io.h"
#include "session_cases.h"
#include "test_helpers.h"

namespace retnet {
namespace {

// The byte tokenizer, with a chosen end-of-sequence token.
class EosBytes final : public Tokenizer {
 public:
  explicit EosBytes(int32_t eos) : bytes_(make_byte_tokenizer()), eos_(eos) {}
  std::string kind() const override { return bytes_->kind(); }
  int64_t vocab_size() const override { return bytes_->vocab_size(); }
  std::vector<int32_t> encode(std::string_view t) const override { return bytes_->encode(t); }
  std::string token_bytes(int32_t id) const override { return bytes_->token_bytes(id); }
  int32_t eos_id() const override { return eos_; }
  std::string serialize() const override { return bytes_->serialize(); }

 private:
  std::unique_ptr<Tokenizer> bytes_;
  int32_t eos_;
};

struct Decoded {
  SequenceResult result;
  GenerationTimings timings;
};

Decoded run_generate(const Model& m, const Tokenizer& tok, const std::string& prompt,
                     GenerateOptions o) {
  Session s(m);
  s.add_sequence();
  Decoded r;
  r.result = generate(s, tok, {tok.encode(prompt)}, o, &r.timings).at(0);
  return r;
}

const std::vector<std::string> kSpecPrompts = {
    "First Citizen:\nBefore we proceed any further, hear me speak.", "x",
    // Copy-heavy: the continuation is likely to repeat what came before.
    "abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc"};

class Speculative : public ::testing::TestWithParam<test::SessionCase> {
 protected:
  Model model() const {
    Config c = GetParam().config;
    c.vocab_size = 256;  // the byte tokenizer's
    return Model::init(c, 11);
  }
};

void expect_same(const Decoded& plain, const Decoded& fast, const std::string& what) {
  EXPECT_EQ(fast.result.text, plain.result.text) << what;
  EXPECT_EQ(fast.result.generated_tokens, plain.result.generated_tokens) << what;
  EXPECT_EQ(fast.result.finish_reason, plain.result.finish_reason) << what;
  EXPECT_EQ(fast.result.text_tail, plain.result.text_tail) << what;
}

TEST_P(Speculative, GivesThePlainTextGreedyAndSampled) {
  const Model m = model();
  const auto tok = make_byte_tokenizer();
  int64_t accepted_on_copy = 0;
  for (float temperature : {0.f, 0.9f}) {
    for (const std::string& prompt : kSpecPrompts) {
      GenerateOptions o;
      o.max_tokens = 48;
      o.sampling.temperature = temperature;
      o.sampling.seed = 5;
      const Decoded plain = run_generate(m, *tok, prompt, o);
      o.speculative.lookup = 3;
      o.speculative.draft_max = 6;
      const Decoded fast = run_generate(m, *tok, prompt, o);
      const std::string what = "temperature " + std::to_string(temperature) + ", prompt " + prompt;
      expect_same(plain, fast, what);
      EXPECT_EQ(plain.result.finish_reason, "length") << what;
      EXPECT_LE(fast.timings.accepted_tokens, fast.timings.drafted_tokens);
      EXPECT_EQ(fast.timings.decode_tokens, fast.result.generated_tokens)
          << "every generated token is fed once";
      if (temperature == 0 && prompt == kSpecPrompts.back())
        accepted_on_copy = fast.timings.accepted_tokens;
    }
  }
  EXPECT_GT(accepted_on_copy, 0) << "drafts are kept where the text repeats";
}

// A batch with lookup: each prompt gets the text, token count and finish reason it gets in a plain
// batch (greedy and seeded), sequences with and without drafts stepping side by side, and a stop
// string ending some sequences early while the others go on.
TEST_P(Speculative, BatchGivesEachPromptItsPlainText) {
  const Model m = model();
  const auto tok = make_byte_tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : kSpecPrompts) prompts.push_back(tok->encode(p));
  const int64_t n = static_cast<int64_t>(prompts.size());
  auto run = [&](const GenerateOptions& o, GenerationTimings* tm) {
    Session s(m, {.capacity = n});
    for (int64_t i = 0; i < n; ++i) s.add_sequence();
    return generate(s, *tok, prompts, o, tm);
  };
  int64_t accepted = 0;
  for (float temperature : {0.f, 0.9f}) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = temperature;
    o.sampling.seed = 9;
    std::string first_text;
    for (int pass = 0; pass < 2; ++pass) {
      o.speculative.lookup = 0;
      if (pass == 1) {  // a stop string from the first prompt's text
        ASSERT_GT(first_text.size(), 12u);
        o.stop = {first_text.substr(8, 2)};
      }
      const std::vector<SequenceResult> plain = run(o, nullptr);
      first_text = plain[0].text;
      o.speculative.lookup = 3;
      o.speculative.draft_max = 5;
      GenerationTimings tm;
      const std::vector<SequenceResult> fast = run(o, &tm);
      for (int64_t i = 0; i < n; ++i) {
        const std::string what = "temperature " + std::to_string(temperature) + ", prompt " +
                                 std::to_string(i) + (o.stop.empty() ? "" : ", stop string");
        EXPECT_EQ(fast[i].text, plain[i].text) << what;
        EXPECT_EQ(fast[i].tokens, plain[i].tokens) << what;
        EXPECT_EQ(fast[i].finish_reason, plain[i].finish_reason) << what;
      }
      EXPECT_LE(tm.accepted_tokens, tm.drafted_tokens);
      accepted += tm.accepted_tokens;
    }
  }
  EXPECT_GT(accepted, 0) << "drafts are kept where the text repeats";
}

// A stop string, the budget and the end-of-sequence token end the text where plain decoding ends
// it, also when the token that ends it is a kept draft.
TEST_P(Speculative, EndsWherePlainDecodingEnds) {
  const Model m = model();
  const auto bytes = make_byte_tokenizer();
  GenerateOptions o;
  o.max_tokens = 40;
  o.sampling.temperature = 0;
  const std::string& prompt = kSpecPrompts.back();
  // The greedy tokens, as bytes: stop strings and end-of-sequence tokens are taken from them.
  std::string text;
  {
    Session s(m);
    s.add_sequence();
    const std::vector<int32_t> ids = bytes->encode(prompt);
    s.prefill(0, ids.data(), static_cast<int64_t>(ids.size()));
    for (int i = 0; i < 40; ++i) {
      const int32_t t = s.sample(0, o.sampling);
      text += static_cast<char>(t);
      s.step(&t);
    }
  }
  for (int64_t budget : {1, 2, 7, 23}) {
    o.max_tokens = budget;
    const Decoded plain = run_generate(m, *bytes, prompt, o);
    o.speculative.lookup = 2;
    expect_same(plain, run_generate(m, *bytes, prompt, o), "budget " + std::to_string(budget));
    o.speculative.lookup = 0;
  }
  o.max_tokens = 40;
  for (size_t at : {size_t{0}, size_t{5}, size_t{17}}) {
    const std::vector<std::string> stop = {text.substr(at, 2)};
    o.stop = stop;
    const Decoded plain = run_generate(m, *bytes, prompt, o);
    o.speculative.lookup = 2;
    expect_same(plain, run_generate(m, *bytes, prompt, o), "stop " + stop[0]);
    EXPECT_EQ(plain.result.finish_reason, "stop");
    o.speculative.lookup = 0;
  }
  o.stop.clear();
  for (size_t at : {size_t{0}, size_t{6}, size_t{19}}) {
    const EosBytes eos(static_cast<unsigned char>(text[at]));
    const Decoded plain = run_generate(m, eos, prompt, o);
    o.speculative.lookup = 2;
    expect_same(plain, run_generate(m, eos, prompt, o), "eos at " + std::to_string(at));
    EXPECT_EQ(plain.result.finish_reason, "eos");
    o.speculative.lookup = 0;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, Speculative, ::testing::ValuesIn(test::session_cases()),
                         [](const auto& info) { return info.param.name; });

// The checking pass runs the decode products on the packed weights of every inference type (a
// few rows use the decode kernels), so the text stays the plain one for each.
TEST(Speculative, GivesThePlainTextForEveryWeightType) {
  const auto tok = make_byte_tokenizer();
  for (DecodePrecision p : {DecodePrecision::F32, DecodePrecision::F16, DecodePrecision::BF16,
                            DecodePrecision::Q8_0, DecodePrecision::Q4_0}) {
    Model m = Model::init(test::model_config(32, 64, 4, 64, 2, 256), 13);  // blocks of 32
    m.prepare_decode(p);
    for (float temperature : {0.f, 0.9f}) {
      GenerateOptions o;
      o.max_tokens = 40;
      o.sampling.temperature = temperature;
      const Decoded plain = run_generate(m, *tok, kSpecPrompts.back(), o);
      o.speculative.lookup = 3;
      expect_same(plain, run_generate(m, *tok, kSpecPrompts.back(), o),
                  "precision " + std::to_string(static_cast<int>(p)) + ", temperature " +
                      std::to_string(temperature));
    }
  }
}

TEST(PromptLookup, DraftsWhatFollowedTheLatestLongestMatch) {
  std::vector<int32_t> draft;
  // "1 2 3 9 | 7 2 3 8 8 | 2 3": the suffix "2 3" last occurred before "8 8".
  prompt_lookup_draft({1, 2, 3, 9, 7, 2, 3, 8, 8, 2, 3}, 3, 4, draft);
  EXPECT_EQ(draft, (std::vector<int32_t>{8, 8, 2, 3}));
  // The longer suffix "1 2 3" wins over the later "2 3".
  prompt_lookup_draft({1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3}, 3, 2, draft);
  EXPECT_EQ(draft, (std::vector<int32_t>{9, 5}));
  // Up to the end of the text; nothing without a match or a budget.
  prompt_lookup_draft({4, 5, 4}, 2, 8, draft);
  EXPECT_EQ(draft, (std::vector<int32_t>{5, 4}));
  prompt_lookup_draft({1, 2, 3}, 3, 8, draft);
  EXPECT_TRUE(draft.empty());
  prompt_lookup_draft({4, 5, 4}, 2, 0, draft);
  EXPECT_TRUE(draft.empty());
  prompt_lookup_draft({}, 2, 3, draft);
  EXPECT_TRUE(draft.empty());
}

TEST(DraftLength, GrowsShrinksAndPauses) {
  DraftLength k(8);
  EXPECT_EQ(k.next(), 4);
  k.update(4, 4);
  EXPECT_EQ(k.next(), 8);
  k.update(8, 8);
  EXPECT_EQ(k.next(), 8) << "at most the maximum";
  k.update(3, 8);
  EXPECT_EQ(k.next(), 4);
  k.update(0, 4);
  EXPECT_EQ(k.next(), 2) << "one miss does not pause";
  k.update(0, 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(k.next(), 0) << "two misses pause drafting";
  EXPECT_EQ(k.next(), 1);
  k.update(0, 1);
  EXPECT_EQ(k.next(), 1);
  k.update(0, 1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(k.next(), 0) << "the next pause is longer";
  EXPECT_EQ(k.next(), 1);
  k.update(1, 1);
  EXPECT_EQ(k.next(), 2) << "a kept draft ends the pauses";
}

// Timed checks: drafting pauses when the checks' savings sum below zero, whether or not they
// kept tokens, and the pauses shorten once checks have saved again.
TEST(DraftLength, PausesWhenTheChecksSavingsTurnNegative) {
  DraftLength k(8);
  EXPECT_EQ(k.next(), 4);
  k.update(4, 4, 3.0);  // kept all, saved 3 steps
  EXPECT_EQ(k.next(), 8);
  k.update(1, 8, -1.0);  // kept one, lost a step: the balance (2) still holds
  EXPECT_EQ(k.next(), 4);
  k.update(1, 4, -1.5);  // 0.5 left
  EXPECT_EQ(k.next(), 2);
  k.update(1, 2, -0.6);  // kept a token, yet the checks lost overall: pause
  for (int i = 0; i < 4; ++i) EXPECT_EQ(k.next(), 0) << i;
  EXPECT_EQ(k.next(), 1);
  k.update(1, 1, -0.1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(k.next(), 0) << "the next pause is longer: " << i;
  EXPECT_EQ(k.next(), 2);
  k.update(2, 2, 1.0);
  k.update(4, 4, 1.5);  // 2.5 saved since the pause: the pauses start again from 4
  EXPECT_EQ(k.next(), 8);
  k.update(0, 8, -3.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(k.next(), 0) << i;
  EXPECT_EQ(k.next(), 4);
  // The credit is capped: a long profitable run pays for at most kCredit lost steps.
  for (int i = 0; i < 20; ++i) k.update(4, 4, 2.0);
  k.update(0, 8, -(DraftLength::kCredit + 0.5));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(k.next(), 0) << i;
}

TEST(Speculative, RefusesADraftModelBatchAndBadOptions) {
  const Model m = Model::init(test::small_decode_config(), 3);
  const auto tok = make_byte_tokenizer();
  GenerateOptions o;
  o.speculative.draft_model = &m;
  Session two(m, {.capacity = 2});
  two.add_sequence();
  two.add_sequence();
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        generate(two, *tok, {tok->encode("a"), tok->encode("b")}, o);
      },
      {"one sequence", "2 prompts"}));
  o.speculative.draft_model = nullptr;
  o.speculative.lookup = 2;
  Session one(m);
  one.add_sequence();
  o.speculative.draft_max = 0;
  EXPECT_TRUE(test::throws_error_naming([&] { generate(one, *tok, {tok->encode("a")}, o); },
                                        {"draft max", "got 0"}));
  o.speculative.draft_max = 4;
  o.speculative.lookup = -1;
  EXPECT_TRUE(test::throws_error_naming([&] { generate(one, *tok, {tok->encode("a")}, o); },
                                        {"lookup", "got -1"}));
}

// `retnet generate --lookup`: the plain text, drafts counted in --json, refused for a batch.
TEST(SpeculativeCli, LookupGivesThePlainTextAndCountsDrafts) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("retnet_spec_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "m.safetensors").string();
  save_model(Model::init(test::small_decode_config(), 21), model);
  const std::string g =
      "generate -m " + model + " -n 60 --temp 0 --json -p '" + kSpecPrompts.back() + "' ";
  const auto plain = test::run_retnet(g, 300), fast = test::run_retnet(g + "--lookup 3", 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(fast.out);
  EXPECT_EQ(b["text"], a["text"]);
  EXPECT_FALSE(a.contains("drafted_tokens")) << "only with --lookup";
  EXPECT_GE(b["drafted_tokens"].get<int64_t>(), b["accepted_tokens"].get<int64_t>());
  EXPECT_GT(b["checks"].get<int64_t>(), 0);
  EXPECT_NE(fast.err.find("drafted tokens"), std::string::npos) << "a timing line on stderr";
  std::ofstream(dir / "prompts.txt") << "a\n" << kSpecPrompts.back() << "\n";
  const std::string batch =
      "generate -m " + model + " -n 30 --temp 0 --prompts-file " + (dir / "prompts.txt").string();
  const auto lines = test::run_retnet(batch, 300),
             fast_lines = test::run_retnet(batch + " --lookup 2", 300);
  ASSERT_EQ(fast_lines.exit_code, 0) << fast_lines.err;
  EXPECT_EQ(fast_lines.out, lines.out) << "a --prompts-file batch with --lookup: the plain lines";
  EXPECT_NE(fast_lines.err.find("drafted tokens"), std::string::npos);
  EXPECT_TRUE(test::fails_cleanly(
      test::run_retnet("generate -m " + model + " -p a --lookup 2 --draft-max 0"),
      "--draft-max: must be an integer in [1, "));
  const auto help = test::run_retnet("generate --help");
  EXPECT_NE(help.out.find("--lookup"), std::string::npos);
  EXPECT_NE(help.out.find("--draft-max"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace retnet
