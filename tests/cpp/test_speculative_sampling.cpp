// Speculative sampling with a draft model: the rule (keep a draft x ~ q with probability
// min(1, p(x) / q(x)), else draw from max(0, p - q)) leaves the output distributed as the target's
// p; a chi-square test over many seeds tells it from the broken rule that redraws from p; greedy
// decoding with a draft model gives the plain text, whatever the draft.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "retnet/core/rng.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/speculative.h"
#include "retnet/model/model.h"
#include "retnet/model/model_io.h"
#include "retnet/text/tokenizer.h"
#include "session_cases.h"
#include "test_helpers.h"

namespace retnet {
namespace {

// A vocabulary of `n` one-letter tokens, no end-of-sequence token: few enough outcomes of the
// first tokens for a chi-square test.
class Letters final : public Tokenizer {
 public:
  explicit Letters(int64_t n) : n_(n) {}
  std::string kind() const override { return "bytes"; }
  int64_t vocab_size() const override { return n_; }
  std::vector<int32_t> encode(std::string_view t) const override {
    std::vector<int32_t> ids;
    for (char c : t) ids.push_back(static_cast<int32_t>((c - 'a') % n_));
    return ids;
  }
  std::string token_bytes(int32_t id) const override { return std::string(1, char('a' + id)); }
  std::string serialize() const override { return ""; }

 private:
  int64_t n_;
};

// Upper quantile of the chi-square distribution with `df` degrees of freedom at z standard
// deviations (Wilson-Hilferty).
double chi_square_quantile(int64_t df, double z) {
  const double a = 2.0 / (9.0 * static_cast<double>(df));
  return static_cast<double>(df) * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct ChiSquare {
  double statistic = 0;
  int64_t df = 0;
};

// Pearson's statistic of `counts` (n draws) against `expected` probabilities; cells expected
// fewer than 5 times are pooled into one.
ChiSquare chi_square(const std::map<std::string, int64_t>& counts,
                     const std::map<std::string, double>& expected, int64_t n) {
  ChiSquare out;
  double pooled_e = 0, pooled_o = 0;
  int64_t cells = 0, seen = 0;
  for (const auto& [key, prob] : expected) {
    const auto it = counts.find(key);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second), e = prob * n;
    seen += static_cast<int64_t>(o);
    if (e < 5) {
      pooled_e += e, pooled_o += o;
      continue;
    }
    out.statistic += (o - e) * (o - e) / e;
    ++cells;
  }
  // Outcomes the target gives no probability: infinitely unlikely.
  if (seen != n) out.statistic = INFINITY;
  if (pooled_e > 0) {
    out.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  out.df = cells - 1;
  return out;
}

TEST(SpeculativeSampling, PickIsDistributedAsTheTarget) {
  const std::vector<float> p = {0.05f, 0.4f, 0.3f, 0.0f, 0.25f}, q = {0.3f, 0.1f, 0.3f, 0.2f, 0.1f};
  const int64_t V = 5, n = 20000;
  const Philox rng(7);
  std::map<std::string, double> expected;
  for (int64_t i = 0; i < V; ++i)
    if (p[i] > 0) expected[std::to_string(i)] = p[i];
  for (bool broken : {false, true}) {
    std::map<std::string, int64_t> counts;
    for (int64_t i = 0; i < n; ++i) {
      const auto ui = static_cast<uint64_t>(i);
      const int32_t x = draw_token(q.data(), V, rng.uniform(1, ui));
      const SpeculativePick pick = speculative_pick(p.data(), q.data(), V, x, rng.uniform(2, ui),
                                                    rng.uniform(3, ui), broken);
      if (pick.kept) {
        EXPECT_EQ(pick.token, x);
      }
      ++counts[std::to_string(pick.token)];
    }
    const ChiSquare c = chi_square(counts, expected, n);
    const double limit = chi_square_quantile(c.df, 3.719);  // p = 1e-4
    if (broken)
      EXPECT_GT(c.statistic, limit) << "the broken rule must fail the test";
    else
      EXPECT_LT(c.statistic, limit) << "df " << c.df;
  }
  // One-hot distributions (greedy): the target's choice, kept when the draft has it.
  const std::vector<float> a = {0, 1, 0, 0, 0}, b = {0, 0, 0, 1, 0};
  EXPECT_TRUE(speculative_pick(a.data(), a.data(), V, 1, 0.999, 0.5).kept);
  const SpeculativePick miss = speculative_pick(a.data(), b.data(), V, 3, 0.001, 0.999);
  EXPECT_FALSE(miss.kept);
  EXPECT_EQ(miss.token, 1);
}

struct FirstTokens {
  std::map<std::string, int64_t> plain, speculative, broken;
  GenerationTimings timings;  // the speculative runs' counts, summed
};

// The first three tokens after `prompt` over `n` seeds, plain and with the draft model, and the
// target's exact probability of each.
FirstTokens sample_first_tokens(const Model& target, const Model& draft, const Tokenizer& tok,
                                const std::string& prompt, const SamplingParams& sp, int64_t n) {
  FirstTokens out;
  for (int64_t seed = 0; seed < n; ++seed) {
    GenerateOptions o;
    o.max_tokens = 3;
    o.sampling = sp;
    o.sampling.seed = static_cast<uint64_t>(seed);
    for (int variant = 0; variant < 3; ++variant) {
      o.speculative.draft_model = variant ? &draft : nullptr;
      o.speculative.resample_from_p = variant == 2;
      Session s(target);
      s.add_sequence();
      GenerationTimings t;
      const SequenceResult r = generate(s, tok, {tok.encode(prompt)}, o, &t).at(0);
      (variant == 0 ? out.plain : variant == 1 ? out.speculative : out.broken)[r.text] += 1;
      if (variant == 1) {
        out.timings.checks += t.checks;
        out.timings.drafted_tokens += t.drafted_tokens;
        out.timings.accepted_tokens += t.accepted_tokens;
      }
    }
  }
  return out;
}

// The target's probability of every three-token continuation of `prompt`, with the sampler's
// transforms (penalties see the tokens chosen before).
std::map<std::string, double> exact_first_tokens(const Model& target, const Tokenizer& tok,
                                                 const std::string& prompt,
                                                 const SamplingParams& sp) {
  const int64_t V = tok.vocab_size();
  std::map<std::string, double> out;
  std::vector<float> probs(static_cast<size_t>(V));
  auto distribution = [&](const std::string& text) {
    Session s(target);
    s.add_sequence();
    const std::vector<int32_t> ids = tok.encode(text);
    s.prefill(0, ids.data(), static_cast<int64_t>(ids.size()));
    s.distribution(0, s.logits(0), sp, probs.data());
    return probs;
  };
  const std::vector<float> p1 = distribution(prompt);
  for (int64_t a = 0; a < V; ++a) {
    if (p1[a] == 0) continue;
    const std::string ta = tok.token_bytes(static_cast<int32_t>(a));
    const std::vector<float> p2 = distribution(prompt + ta);
    for (int64_t b = 0; b < V; ++b) {
      if (p2[b] == 0) continue;
      const std::string tb = tok.token_bytes(static_cast<int32_t>(b));
      const std::vector<float> p3 = distribution(prompt + ta + tb);
      for (int64_t c = 0; c < V; ++c)
        if (p3[c] > 0)
          out[ta + tb + tok.token_bytes(static_cast<int32_t>(c))] = double(p1[a]) * p2[b] * p3[c];
    }
  }
  return out;
}

TEST(SpeculativeSampling, FirstTokensAreDistributedAsPlainSampling) {
  Config c = test::tiny_config();
  c.vocab_size = 6;
  const Model target = Model::init(c, 31), draft = Model::init(c, 32);
  const Letters tok(6);
  SamplingParams sp;
  sp.temperature = 0.7f;
  sp.top_k = 4;
  sp.top_p = 0.97f;
  sp.repeat_penalty = 1.3f;
  const std::string prompt = "abcab";
  const int64_t n = 4000;
  const FirstTokens got = sample_first_tokens(target, draft, tok, prompt, sp, n);
  const std::map<std::string, double> exact = exact_first_tokens(target, tok, prompt, sp);
  const ChiSquare plain = chi_square(got.plain, exact, n),
                  speculative = chi_square(got.speculative, exact, n),
                  broken = chi_square(got.broken, exact, n);
  const double limit = chi_square_quantile(plain.df, 3.719);  // p = 1e-4
  std::printf("chi-square (df %lld, limit %.1f): plain %.1f, speculative %.1f, broken %.1f\n",
              (long long)plain.df, limit, plain.statistic, speculative.statistic, broken.statistic);
  EXPECT_LT(plain.statistic, limit) << "the exact probabilities are plain sampling's";
  EXPECT_LT(speculative.statistic, limit);
  EXPECT_GT(broken.statistic, limit) << "the test tells the broken rule";
  EXPECT_GT(got.timings.drafted_tokens, got.timings.accepted_tokens);
  EXPECT_GT(got.timings.accepted_tokens, 0);
}

// Greedy: the plain text with a draft model that differs from the target (drafts rejected and
// kept), and with the target as its own draft (every draft kept).
class SpeculativeDraft : public ::testing::TestWithParam<test::SessionCase> {};

TEST_P(SpeculativeDraft, GreedyGivesThePlainText) {
  Config c = GetParam().config;
  c.vocab_size = 256;
  const Model target = Model::init(c, 11), other = Model::init(c, 12);
  const auto tok = make_byte_tokenizer();
  for (const std::string prompt : {"First Citizen:\nBefore we proceed", "x"}) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = 0;
    auto run = [&](const Model* draft, GenerationTimings* t) {
      o.speculative.draft_model = draft;
      o.speculative.draft_max = 5;
      Session s(target);
      s.add_sequence();
      return generate(s, *tok, {tok->encode(prompt)}, o, t).at(0);
    };
    GenerationTimings t_other, t_self;
    const SequenceResult plain = run(nullptr, nullptr);
    const SequenceResult with_other = run(&other, &t_other), with_self = run(&target, &t_self);
    EXPECT_EQ(with_other.text, plain.text) << prompt;
    EXPECT_EQ(with_other.finish_reason, plain.finish_reason);
    EXPECT_EQ(with_self.text, plain.text) << prompt;
    EXPECT_EQ(t_other.decode_tokens, plain.generated_tokens) << "every token fed once";
    EXPECT_LT(t_other.accepted_tokens, t_other.drafted_tokens) << "another model's drafts miss";
    EXPECT_GT(t_self.checks, 0);
    EXPECT_EQ(t_self.accepted_tokens, t_self.drafted_tokens) << "its own drafts are all kept";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, SpeculativeDraft, ::testing::ValuesIn(test::session_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SpeculativeDraft, RefusesAnotherVocabularyAndLookupWithIt) {
  Config c = test::small_decode_config();
  const Model target = Model::init(c, 3);
  c.vocab_size = 300;
  const Model bigger = Model::init(c, 4);
  const auto tok = make_byte_tokenizer();
  GenerateOptions o;
  o.speculative.draft_model = &bigger;
  Session s(target);
  s.add_sequence();
  EXPECT_TRUE(test::throws_error_naming([&] { generate(s, *tok, {tok->encode("ab")}, o); },
                                        {"300", "256"}));
  o.speculative.draft_model = &target;
  o.speculative.lookup = 2;
  EXPECT_TRUE(test::throws_error_naming([&] { generate(s, *tok, {tok->encode("ab")}, o); },
                                        {"lookup", "draft model"}));
}

// `retnet generate --draft-model`: the plain greedy text, drafts counted in --json; another
// vocabulary or tokenizer, a batch and --lookup beside it refused.
TEST(SpeculativeCli, DraftModelGivesThePlainTextAndCountsDrafts) {
  namespace fs = std::filesystem;
  const fs::path dir = test::fresh_temp_dir("spec_draft_cli");
  const std::string model = (dir / "m.safetensors").string(),
                    draft = (dir / "d.safetensors").string(),
                    bigger = (dir / "big.safetensors").string(),
                    other_tok = (dir / "tok.safetensors").string();
  Config c = test::small_decode_config();
  save_model(Model::init(c, 21), model);
  save_model(Model::init(c, 22), draft);
  const auto hf = make_hf_tokenizer(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})", "two-letter");
  save_model(Model::init(c, 23), other_tok, tokenizer_metadata(*hf));
  c.vocab_size = 300;
  save_model(Model::init(c, 24), bigger);
  const std::string g = "generate -m " + model + " -n 40 --temp 0 --json -p 'First Citizen' ";
  const auto plain = test::run_retnet(g, 300),
             fast = test::run_retnet(g + "--draft-model " + draft, 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(fast.out);
  EXPECT_EQ(b["text"], a["text"]);
  EXPECT_GT(b["drafted_tokens"].get<int64_t>(), 0);
  EXPECT_GE(b["drafted_tokens"].get<int64_t>(), b["accepted_tokens"].get<int64_t>());
  EXPECT_GT(b["checks"].get<int64_t>(), 0);
  const auto self = nlohmann::json::parse(test::run_retnet(g + "--draft-model " + model, 300).out);
  EXPECT_EQ(self["text"], a["text"]);
  EXPECT_EQ(self["accepted_tokens"], self["drafted_tokens"]) << "its own drafts are all kept";
  EXPECT_TRUE(test::fails_cleanly(test::run_retnet(g + "--draft-model " + bigger, 300),
                                  "vocabulary of 300 tokens"));
  EXPECT_TRUE(test::fails_cleanly(test::run_retnet(g + "--draft-model " + other_tok, 300),
                                  "another tokenizer"));
  EXPECT_TRUE(test::fails_cleanly(test::run_retnet(g + "--draft-model " + draft + " --lookup 2"),
                                  "not both"));
  const auto help = test::run_retnet("generate --help");
  EXPECT_NE(help.out.find("--draft-model"), std::string::npos);
  fs::remove_all(dir);
}

// `retnet bench speculative`: a figure per weight type and k, finite and positive.
TEST(BenchSpeculative, WritesACheckCostPerTypeAndLength) {
  namespace fs = std::filesystem;
  const fs::path dir = test::fresh_temp_dir("bench_spec");
  const std::string model = (dir / "m.safetensors").string(), out = (dir / "r.json").string();
  save_model(Model::init(test::model_config(32, 64, 4, 64, 2, 256), 5), model);  // blocks of 32
  const auto r = test::run_retnet("bench speculative -m " + model +
                                      " --dtype f32,q8_0 --k 1,3 --reps 1 --rounds 2 --position 8 "
                                      "--json " +
                                      out,
                                  300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("break-even"), std::string::npos);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["dtype"], "q8_0");
  EXPECT_TRUE(j["machine"].contains("cpu"));
  for (const auto& run : j["runs"]) {
    ASSERT_EQ(run["checks"].size(), 2u);
    EXPECT_EQ(run["checks"][1]["k"], 3);
    for (const auto& c : run["checks"]) {
      const double ratio = c["relative_to_step"].get<double>();
      EXPECT_TRUE(std::isfinite(ratio) && ratio > 0) << ratio;
      EXPECT_GE(c["break_even_tokens_per_check"].get<double>(), 1.0);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace retnet
