// Generation through the Session API: greedy decoding against the parallel form, save -> load ->
// continue against one run, chunked prefill against whole prefill, batched against alone, and the
// streaming rules (complete UTF-8 characters, stop strings).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "retnet/infer/generator.h"
#include "retnet/model/forward.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using namespace retnet;
using retnet::test::close;

namespace {

Config small_config() {
  Config c;
  c.embed_dim = 32;
  c.value_embed_dim = 48;
  c.heads = 4;
  c.ffn_dim = 40;
  c.layers = 2;
  c.vocab_size = 256;
  c.recurrent_chunk_size = 8;
  return c;
}

std::vector<int32_t> text_ids(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char ch : s) ids.push_back(ch);
  return ids;
}

std::vector<int32_t> generate_ids(const Model& m, const std::vector<int32_t>& prompt,
                                  int64_t n, const SamplingParams& sp) {
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
  Model m = Model::init(small_config(), 7);
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
    ASSERT_EQ(gen[i], std::max_element(z, z + V) - z) << "generated token " << i;
  }
}

TEST(Generate, ChunkedPrefillEqualsWholePrefill) {
  Model m = Model::init(small_config(), 3);
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
  EXPECT_EQ(generate_ids(m, prompt, 20, greedy()),
            [&] {
              std::vector<int32_t> out;
              for (int i = 0; i < 20; ++i) {
                out.push_back(b.sample(0, greedy()));
                b.step(&out.back());
              }
              return out;
            }());
}

TEST(Generate, SavedStateContinuesLikeOneRun) {
  Model m = Model::init(small_config(), 11);
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
  Model m = Model::init(small_config(), 5);
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
      GenerateOptions solo = o;
      solo.streams = {i};  // the random stream sequence i has in the batch
      auto r = generate(alone, *tok, {prompts[i]}, solo);
      EXPECT_EQ(together[i].text, r[0].text) << "prompt " << i << ", temperature " << temperature;
      EXPECT_EQ(together[i].finish_reason, r[0].finish_reason) << "prompt " << i;
      EXPECT_EQ(together[i].generated_tokens, r[0].generated_tokens) << "prompt " << i;
    }
    bool some_stopped = false;
    for (auto& r : together) some_stopped |= r.finish_reason == "stop";
    EXPECT_TRUE(some_stopped);
  }
}

TEST(Generate, SameSeedSameTextAnyThreadCount) {
  Model m = Model::init(small_config(), 13);
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

TEST(Generate, StateFileRejectsDamageAndOtherModels) {
  Model m = Model::init(small_config(), 1), other = Model::init(small_config(), 2);
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
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(z.data(), V, p, 0, i, nullptr, 0, scratch), best);
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
