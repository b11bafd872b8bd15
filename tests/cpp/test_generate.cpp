// Generation through the Session API: greedy decoding against the parallel form, save -> load ->
// continue against one run, chunked prefill against whole prefill, batched against alone, and the
// streaming rules (complete UTF-8 characters, stop strings).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "retnet/core/error.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/json_schema.h"
#include "retnet/model/forward.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using namespace retnet;
using retnet::test::close;

namespace {


std::vector<int32_t> text_ids(const std::string& s) { return make_byte_tokenizer()->encode(s); }

std::vector<int32_t> generate_ids(const Model& m, const std::vector<int32_t>& prompt, int64_t n,
                                  const SamplingParams& sp) {
  Session s(m);
  s.add_sequence();
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(s.sample(0, sp));
    s.step(&out.back());
  }
  return out;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
}

}  // namespace

TEST(Generate, GreedyEqualsArgmaxOfParallelLogits) {
  for (bool packed : {false, true}) {  // decode products on the plain or the packed weights
    Model m = Model::init(test::small_decode_config(), 7);
    if (packed) m.prepare_decode(DecodePrecision::F32);
    const auto prompt = text_ids("First Citizen:\nBefore we proceed");
    const int64_t n = 48, P = static_cast<int64_t>(prompt.size()), V = 256;
    auto gen = generate_ids(m, prompt, n, greedy());
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), gen.begin(), gen.end() - 1);
    std::vector<float> logits(all.size() * V);
    Arena arena;
    forward_logits(m, all.data(), 1, static_cast<int64_t>(all.size()), logits.data(), {}, arena);
    for (int64_t i = 0; i < n; ++i) {
      const float* z = logits.data() + (P - 1 + i) * V;
      ASSERT_EQ(gen[i], std::max_element(z, z + V) - z)
          << "generated token " << i << ", packed " << packed;
    }
  }
}

TEST(Generate, F16DecodeWeightsStayCloseToF32) {
  // Decoding from the f16 copy of the weights: logits within 1e-2 relative of the exact ones over
  // 64 steps (measured about 1e-3), and batched still equal to alone bit for bit.
  Model exact = Model::init(test::small_decode_config(), 17),
        half = Model::init(test::small_decode_config(), 17);
  half.prepare_decode(DecodePrecision::F16);
  const auto prompt = text_ids("Shall I compare thee");
  Session a(exact), b(half, {.capacity = 2});
  a.add_sequence();
  b.add_sequence();
  b.add_sequence();
  a.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  for (int64_t s = 0; s < 2; ++s) b.prefill(s, prompt.data(), static_cast<int64_t>(prompt.size()));
  double worst = 0;
  for (int i = 0; i < 64; ++i) {
    const int32_t t = a.sample(0, greedy());
    const int32_t both[2] = {t, t};
    a.step(&t);
    b.step(both);
    std::vector<float> la(a.logits(0), a.logits(0) + 256), lb(b.logits(0), b.logits(0) + 256),
        lb1(b.logits(1), b.logits(1) + 256);
    ASSERT_TRUE(close(lb, la, 1e-2)) << "step " << i;  // fails on NaN, names the element
    worst = std::max(worst, retnet::test::rel_max_error(lb, la));
    ASSERT_EQ(lb, lb1) << "step " << i;
  }
  EXPECT_LT(worst, 1e-2);
  EXPECT_GT(worst, 0.0) << "f16 weights should not be bit-identical to f32";
}

TEST(Generate, ChunkedPrefillEqualsWholePrefill) {
  Model m = Model::init(test::small_decode_config(), 3);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back((i * 37 + 11) % 256);
  SessionOptions whole, blocks;
  blocks.prefill_block = 7;  // neither a multiple of the chunk nor of the prompt
  Session a(m, whole), b(m, blocks), c(m, whole);
  for (Session* s : {&a, &b, &c}) s->add_sequence();
  a.prefill(0, prompt.data(), 300);
  b.prefill(0, prompt.data(), 300);
  c.prefill(0, prompt.data(), 120);  // two calls
  c.prefill(0, prompt.data() + 120, 180);
  std::vector<float> la(a.logits(0), a.logits(0) + 256);
  for (Session* s : {&b, &c}) {
    std::vector<float> l(s->logits(0), s->logits(0) + 256);
    EXPECT_TRUE(close(l, la, 1e-5));
    EXPECT_EQ(s->position(0), 300);
  }
  EXPECT_EQ(generate_ids(m, prompt, 20, greedy()), [&] {
    std::vector<int32_t> out;
    for (int i = 0; i < 20; ++i) {
      out.push_back(b.sample(0, greedy()));
      b.step(&out.back());
    }
    return out;
  }());
}

TEST(Generate, SavedStateContinuesLikeOneRun) {
  Model m = Model::init(test::small_decode_config(), 11);
  auto tok = make_byte_tokenizer();
  const auto prompt = text_ids("ROMEO:\nBut soft, what light");
  for (float temperature : {0.f, 0.9f}) {
    GenerateOptions o;
    o.sampling.temperature = temperature;
    o.sampling.seed = 42;
    o.sampling.repeat_penalty = 1.3f;  // the recent tokens travel in the state file too
    o.max_tokens = 60;
    Session one(m);
    one.add_sequence();
    auto full = generate(one, *tok, {prompt}, o);

    o.max_tokens = 25;
    Session first(m);
    first.add_sequence();
    auto part1 = generate(first, *tok, {prompt}, o);
    const std::string path = temp_path("retnet_state").string();
    first.save(path, 0, part1[0].text_tail);
    Session second(m);
    second.add_sequence();
    const std::string tail = second.load(path, 0);
    o.max_tokens = 35;
    auto part2 = generate(second, *tok, {{}}, o, nullptr, nullptr, {tail});
    fs::remove(path);
    EXPECT_EQ(part1[0].text + part2[0].text, full[0].text) << "temperature " << temperature;
    EXPECT_EQ(second.position(0), one.position(0));
  }
}

TEST(Generate, BatchedEqualsAlone) {
  Model m = Model::init(test::small_decode_config(), 5);
  m.prepare_decode(DecodePrecision::F32);  // the packed kernel is batch-invariant too
  auto tok = make_byte_tokenizer();
  const std::vector<std::string> texts = {"To be, or not", "A", "Now is the winter of our",
                                          "Friends, Romans, countrymen, lend me your ears;"};
  for (float temperature : {0.f, 0.8f}) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = temperature;
    o.sampling.seed = 9;
    Session batch(m, {.capacity = 4});
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& t : texts) {
      prompts.push_back(text_ids(t));
      batch.add_sequence();
    }
    // A stop string that the first sequence meets early makes it leave the batch mid-way.
    const auto probe = generate_ids(m, prompts[0], 40, o.sampling);
    o.stop = {std::string(probe.begin() + 10, probe.begin() + 13)};
    auto together = generate(batch, *tok, prompts, o);
    for (size_t i = 0; i < texts.size(); ++i) {
      Session alone(m);
      alone.add_sequence();
      auto r = generate(alone, *tok, {prompts[i]}, o);
      EXPECT_EQ(together[i].text, r[0].text) << "prompt " << i << ", temperature " << temperature;
      EXPECT_EQ(together[i].finish_reason, r[0].finish_reason) << "prompt " << i;
      EXPECT_EQ(together[i].generated_tokens, r[0].generated_tokens) << "prompt " << i;
      EXPECT_EQ(together[i].tokens, r[0].tokens) << "prompt " << i;
      EXPECT_EQ(static_cast<int64_t>(r[0].tokens.size()), r[0].generated_tokens) << "prompt " << i;
    }
    bool some_stopped = false;
    for (auto& r : together) some_stopped |= r.finish_reason == "stop";
    EXPECT_TRUE(some_stopped);
  }
}

// A grammar in the options constrains every sequence of a batch: each text is the schema's JSON,
// and the text ends when the value is complete.
TEST(Generate, GrammarConstrainsEverySequence) {
  Model m = Model::init(test::small_decode_config(), 5);
  auto tok = make_byte_tokenizer();
  GenerateOptions o;
  o.max_tokens = 200;
  o.sampling.seed = 3;
  o.grammar = json_schema_grammar(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"enum": ["yes", "no"]}, "n": {"enum": [1, 2, 3]}}, "required": ["a", "n"], "additionalProperties": false})"));
  Session batch(m, {.capacity = 3});
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : {"Answer:", "x", "The reply is "}) {
    prompts.push_back(text_ids(t));
    batch.add_sequence();
  }
  for (const auto& r : generate(batch, *tok, prompts, o)) {
    ASSERT_EQ(r.finish_reason, "stop") << r.text;
    const auto j = nlohmann::json::parse(r.text);
    EXPECT_TRUE(j["a"] == "yes" || j["a"] == "no") << r.text;
    EXPECT_TRUE(j["n"] == 1 || j["n"] == 2 || j["n"] == 3) << r.text;
    EXPECT_EQ(j.size(), 2u) << r.text;
  }
  // Without the grammar the same model writes no JSON.
  o.grammar = nullptr;
  Session free_text(m);
  free_text.add_sequence();
  const auto r = generate(free_text, *tok, {prompts[0]}, o);
  EXPECT_FALSE(nlohmann::json::accept(r[0].text)) << r[0].text;
  // Speculation checks drafts against the plain rule: no grammar with it.
  o.grammar = json_object_grammar();
  o.speculative.lookup = 2;
  Session one(m);
  one.add_sequence();
  EXPECT_THROW(generate(one, *tok, {prompts[0]}, o), Error);
}

TEST(Generate, SameSeedSameTextAnyThreadCount) {
  Model m = Model::init(test::small_decode_config(), 13);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 123;
  const auto prompt = text_ids("KING:");
  auto a = generate_ids(m, prompt, 40, sp);
  auto b = generate_ids(m, prompt, 40, sp);
  EXPECT_EQ(a, b);
  sp.seed = 124;
  EXPECT_NE(a, generate_ids(m, prompt, 40, sp));
}

// The server decodes small steps on one thread and large ones on all (Scheduler::pass_threads), so
// a step must give the same logits, bit for bit, whatever its thread count.
TEST(Generate, StepLogitsAreTheSameOnOneThreadAndTwo) {
  const Model m = Model::init(Config{}, 21);  // the default model: its products split over threads
  std::vector<std::vector<float>> logits;
  for (int threads : {1, 2}) {
    SessionOptions so;
    so.capacity = 3;
    Session s(m, so);
    s.set_decode_threads(threads);
    EXPECT_EQ(s.decode_threads(), threads);
    for (int b = 0; b < 3; ++b) {
      s.add_sequence();
      const auto prompt = text_ids("Stream " + std::to_string(b) + ":");
      s.prefill(b, prompt.data(), static_cast<int64_t>(prompt.size()));
    }
    for (int step = 0; step < 4; ++step) {
      const int32_t tokens[3] = {65 + step, 97 + step, 48 + step};
      s.step(tokens);
    }
    std::vector<float> all;
    for (int b = 0; b < 3; ++b) all.insert(all.end(), s.logits(b), s.logits(b) + s.vocab());
    logits.push_back(std::move(all));
  }
  for (float v : logits[0]) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(logits[0], logits[1]);
  Session s(m);
  EXPECT_TRUE(test::throws_error_naming([&] { s.set_decode_threads(0); }, {"decode threads"}));
}

TEST(Generate, StateFileRejectsDamageAndOtherModels) {
  Model m = Model::init(test::small_decode_config(), 1),
        other = Model::init(test::small_decode_config(), 2);
  Session s(m);
  s.add_sequence();
  const auto prompt = text_ids("hello");
  s.prefill(0, prompt.data(), 5);
  const std::string path = temp_path("retnet_state_bad").string();
  s.save(path, 0);
  Session wrong(other);
  wrong.add_sequence();
  try {
    wrong.load(path, 0);
    FAIL() << "loaded a state of another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto write = [&](const std::string& b) { std::ofstream(path, std::ios::binary) << b; };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  write(flipped);
  EXPECT_THROW(s.load(path, 0), Error);
  write(bytes.substr(0, bytes.size() - 100));
  EXPECT_THROW(s.load(path, 0), Error);
  write("not a state file at all");
  EXPECT_THROW(s.load(path, 0), Error);
  write(bytes);
  EXPECT_NO_THROW(s.load(path, 0));
  fs::remove(path);
}

// A binding stops a generation by throwing from before_step (Ctrl-C); the session stays usable.
TEST(Generate, BeforeStepRunsPerStepAndCanStopTheGeneration) {
  Model m = Model::init(test::small_decode_config(), 7);
  auto tok = make_byte_tokenizer();
  GenerateOptions go;
  go.max_tokens = 20;
  go.stop_at_eos = false;
  int calls = 0;
  go.before_step = [&] {
    if (++calls == 5) throw std::runtime_error("interrupted");
  };
  Session s(m);
  s.add_sequence();
  EXPECT_THROW(generate(s, *tok, {text_ids("Hello")}, go), std::runtime_error);
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(s.position(0), 5 + 4);  // the prompt and the 4 steps before the throw
  calls = -100;
  s.reset_sequence(0);
  EXPECT_EQ(generate(s, *tok, {text_ids("Hello")}, go)[0].generated_tokens, 20);
  EXPECT_EQ(calls, -80);
}

// state_data is the sequence's state in place: a step changes what it points at.
TEST(Generate, StateDataIsTheLiveState) {
  Model m = Model::init(test::small_decode_config(), 7);
  Session s(m, {.capacity = 2});
  s.add_sequence();
  s.add_sequence();
  const auto prompt = text_ids("Hello");
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  const int64_t floats = s.state_bytes_per_sequence() / static_cast<int64_t>(sizeof(float));
  std::vector<float> before(s.state_data(0), s.state_data(0) + floats);
  EXPECT_TRUE(std::any_of(before.begin(), before.end(), [](float x) { return x != 0; }));
  const int32_t next[2] = {65, 66};
  s.step(next);
  EXPECT_FALSE(std::equal(before.begin(), before.end(), s.state_data(0)));
  std::copy(s.state_data(0), s.state_data(0) + floats, s.state_data(1));
  s.fork(0, 0);
  EXPECT_TRUE(std::equal(s.state_data(0), s.state_data(0) + floats, s.state_data(1)));
  EXPECT_THROW(s.state_data(2), Error);
}

TEST(TextReleaser, ReleasesCompleteCharactersOnly) {
  TextReleaser r(nullptr);
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
  EXPECT_EQ(r.push("a"), "a");
  EXPECT_EQ(r.push(euro.substr(0, 1)), "");
  EXPECT_EQ(r.push(euro.substr(1, 1)), "");
  EXPECT_EQ(r.push(euro.substr(2, 1) + "b"), euro + "b");
  EXPECT_EQ(r.push("\xFF"), "\xEF\xBF\xBD");  // not UTF-8 at all: U+FFFD
  EXPECT_EQ(r.push(euro.substr(0, 2)), "");
  std::string tail;
  EXPECT_EQ(r.finish(&tail), "");
  EXPECT_EQ(tail, euro.substr(0, 2));
  TextReleaser resumed(nullptr, tail);  // a continuation completes the character
  EXPECT_EQ(resumed.push(euro.substr(2)), euro);
}

TEST(TextReleaser, StopsBeforeAStopStringAcrossPushes) {
  std::vector<std::string> stop = {"\n\n", "END"};
  TextReleaser r(&stop);
  EXPECT_EQ(r.push("one E"), "one ");  // "E" may begin "END"
  EXPECT_EQ(r.push("N"), "");
  EXPECT_EQ(r.push("X two\n"), "ENX two");
  EXPECT_FALSE(r.stopped());
  EXPECT_EQ(r.push("\nthree"), "");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.push("more"), "");
}

TEST(Sampler, GreedyTopKAndDeterminism) {
  const int64_t V = 50;
  std::vector<float> z(V);
  for (int64_t i = 0; i < V; ++i) z[i] = std::sin(0.7f * i) * 3;
  const int32_t best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  SamplerScratch scratch(V);
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(z.data(), V, p, 0, 0, nullptr, 0, scratch), best);
  p.temperature = 1.5f;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample_token(z.data(), V, p, 0, i, nullptr, 0, scratch), best);
  p.top_k = 0;
  p.top_p = 1e-6f;  // the nucleus shrinks to the top token
  EXPECT_EQ(sample_token(z.data(), V, p, 0, 5, nullptr, 0, scratch), best);
  // A penalty on the best token hands the choice to the runner-up under greedy decoding.
  p = SamplingParams{};
  p.temperature = 0;
  p.repeat_penalty = 100.f;
  EXPECT_NE(sample_token(z.data(), V, p, 0, 0, &best, 1, scratch), best);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // 20,000 draws at temperature 2 over 4 tokens: each frequency within 0.015 of its probability.
  const std::vector<float> z = {1.f, 0.f, -1.f, 0.5f};
  SamplerScratch scratch(4);
  SamplingParams p;
  p.temperature = 2;
  p.top_k = 0;
  p.top_p = 1;
  p.seed = 77;
  std::vector<int> counts(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[sample_token(z.data(), 4, p, 3, i, nullptr, 0, scratch)];
  double total = 0;
  for (float v : z) total += std::exp(v / 2);
  for (int t = 0; t < 4; ++t)
    EXPECT_NEAR(counts[t] / double(n), std::exp(z[t] / 2) / total, 0.015) << "token " << t;
}

// min-p keeps the tokens at least min_p times as likely as the top one (at the temperature);
// presence and frequency penalties subtract from the logits of the window's tokens, the latter
// per occurrence.
TEST(Sampler, MinPAndOpenAIPenalties) {
  // At temperature 1: token 1 is e^-1 = 0.37 times as likely as token 0, token 2 e^-3 = 0.05.
  const std::vector<float> z = {0.f, -1.f, -3.f, -3.f};
  SamplerScratch scratch(4);
  const SamplingParams p{.temperature = 1, .top_k = 0, .top_p = 1, .min_p = 0.1f};
  std::vector<int> counts(4);
  for (int i = 0; i < 2000; ++i) ++counts[sample_token(z.data(), 4, p, 1, i, nullptr, 0, scratch)];
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2] + counts[3], 0) << "min-p 0.1 drops the tokens at 0.05";

  // Greedy picks 0 (logit 0) over 1 (-1) until the penalties push 0 below 1.
  SamplingParams g;
  g.temperature = 0;
  const int32_t recent[] = {0, 0, 0};
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 0);
  g.presence_penalty = 0.9f;  // 0 - 0.9 > -1
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 0);
  g.presence_penalty = 1.1f;
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 1);
  g.presence_penalty = 0;
  g.frequency_penalty = 0.3f;  // three occurrences: 0 - 0.9
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 0);
  g.frequency_penalty = 0.4f;  // 0 - 1.2
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 1);
  g.repeat_last_n = 2;  // two occurrences in the window: 0 - 0.8
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 0);
  g.repeat_last_n = 64;
  g.frequency_penalty = -1.f;  // a negative penalty favours the token
  EXPECT_EQ(sample_token(z.data(), 4, g, 0, 0, recent, 3, scratch), 0);
  g.min_p = 1.5f;
  EXPECT_THROW(g.validate(), Error);
}

// ---- `retnet generate` end to end ----
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/model/model_io.h"

namespace {

class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("retnet_gen_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    save_model(Model::init(test::small_decode_config(), 21), (dir_ / "m.safetensors").string());
    Config other = test::small_decode_config();
    other.layers = 1;
    save_model(Model::init(other, 21), (dir_ / "other.safetensors").string());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::string model() { return path("m.safetensors"); }
  static nlohmann::json run_json(const std::string& args) {
    auto r = retnet::test::run_retnet("generate -m " + model() + " --json " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  static inline fs::path dir_;
};

}  // namespace

TEST_F(GenerateCli, JsonHasTheDocumentedKeysAndStreamingMatchesIt) {
  auto j = run_json("-p 'ROMEO:' -n 40 --temp 0.7 -s 3 --stats");
  for (const char* key :
       {"text", "prompt_tokens", "generated_tokens", "prefill_tokens_per_s", "decode_tokens_per_s",
        "latency_ms_by_position", "peak_rss_bytes", "state_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["prompt_tokens"], 6);
  EXPECT_EQ(j["generated_tokens"], 40);
  EXPECT_TRUE(j["latency_ms_by_position"].contains("16"));
  // Streaming prints the same text (then a newline), whatever the thread count.
  for (int threads : {1, 2}) {
    auto r = retnet::test::run_retnet("generate -m " + model() +
                                      " -p 'ROMEO:' -n 40 --temp 0.7 -s 3 -t " +
                                      std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, j["text"].get<std::string>() + "\n") << threads << " threads";
    EXPECT_NE(r.err.find("eval time"), std::string::npos) << "timing summary on stderr";
  }
}

TEST_F(GenerateCli, StateOutThenStateInContinuesTheText) {
  auto full = run_json("-p 'To be' -n 50 --temp 0.9 -s 8");
  auto first = run_json("-p 'To be' -n 20 --temp 0.9 -s 8 --state-out " + path("s.state"));
  auto rest = run_json("-p '' -n 30 --temp 0.9 -s 8 --state-in " + path("s.state"));
  EXPECT_EQ(first["text"].get<std::string>() + rest["text"].get<std::string>(),
            full["text"].get<std::string>());
}

TEST_F(GenerateCli, PromptsFileDecodesABatchLikeSingleRuns) {
  std::ofstream(path("prompts.txt")) << "First\nSecond prompt\n\nThird one, longer than the rest\n";
  auto r = retnet::test::run_retnet("generate -m " + model() + " --prompts-file " +
                                    path("prompts.txt") + " -n 25 --temp 0.9 -s 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(lines, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 3u);  // the empty line is skipped
  for (const auto& row : rows) {
    auto alone = run_json("-p '" + row["prompt"].get<std::string>() + "' -n 25 --temp 0.9 -s 3");
    EXPECT_EQ(row["text"], alone["text"]) << row["prompt"];
  }
}

TEST_F(GenerateCli, BadInputFailsCleanly) {
  using retnet::test::fails_cleanly;
  using retnet::test::run_retnet;
  const std::string g = "generate -m " + model() + " ";
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p ''"), "prompt is empty"));
  EXPECT_TRUE(fails_cleanly(run_retnet(g), "nothing to continue"));
  std::ofstream(path("bad_utf8.txt"), std::ios::binary) << "ab\xff\xfe"
                                                        << "cd";
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-f " + path("bad_utf8.txt")), "not valid UTF-8"));
  std::ofstream(path("big.txt")) << std::string(1 << 20, 'a');
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-f " + path("big.txt")), "--max-prompt-tokens"));
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p x --temp -1"), "temperature"));
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p x --top-p 0"), "top-p"));
  EXPECT_TRUE(fails_cleanly(
      run_retnet(g + "-f " + path("missing.txt")),
      "cannot read prompt file '" + path("missing.txt") + "': No such file or directory"));
  // State files: missing, from another model, damaged, truncated, not a state file.
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p '' --state-in " + path("none.state")),
                            "cannot read state file"));
  ASSERT_EQ(run_retnet("generate -m " + path("other.safetensors") + " -p hi -n 2 --state-out " +
                       path("other.state"))
                .exit_code,
            0);
  EXPECT_TRUE(
      fails_cleanly(run_retnet(g + "-p '' --state-in " + path("other.state")), "another model"));
  ASSERT_EQ(run_retnet(g + "-p hi -n 2 --state-out " + path("good.state")).exit_code, 0);
  std::string bytes;
  {
    std::ifstream in(path("good.state"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string damaged = bytes;
  damaged[damaged.size() / 3] ^= 1;
  std::ofstream(path("damaged.state"), std::ios::binary) << damaged;
  EXPECT_TRUE(
      fails_cleanly(run_retnet(g + "-p '' --state-in " + path("damaged.state")), "damaged"));
  std::ofstream(path("short.state"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p '' --state-in " + path("short.state"))));
  std::ofstream(path("junk.state"), std::ios::binary) << "hello";
  EXPECT_TRUE(fails_cleanly(run_retnet(g + "-p '' --state-in " + path("junk.state")),
                            "not a retnet state file"));
}

TEST(GenerateCliSlow, MemoryIsFlatOver20000Tokens) {
  // The default-size model: peak RSS after 20,000 generated tokens within 5% of after 200.
  const fs::path m = fs::temp_directory_path() / ("retnet_flat_" + std::to_string(getpid()));
  save_model(Model::init(Config{}, 1), m.string());
  auto peak = [&](int n) {
    auto r = retnet::test::run_retnet("generate -m " + m.string() +
                                      " -t 1 -p 'ROMEO:' --temp 0.8 -s 1 -n " + std::to_string(n) +
                                      " --json --stats");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["peak_rss_bytes"].get<double>();
  };
  const double small = peak(200), large = peak(20000);
  fs::remove(m);
  EXPECT_LE(large, 1.05 * small) << "200 tokens: " << small << " bytes, 20000: " << large;
}
