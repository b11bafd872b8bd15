// The prompt cache's bf16 memory tier (--cache-type bf16): a state takes half the bytes, and
// the drift a rounded state causes is bounded. Claim checked: continuing the same 256 tokens after
// a state restored from the bf16 tier, every step's logits stay within 2e-2 (relative to their
// largest magnitude) of a run restored from the f32 tier, and the gap after the last token is no
// larger than after the first: the rounding decays with the state, it does not accumulate. The
// disk tier's bf16 files (--cache-dir with --cache-type bf16) give the very same state after a
// restart, hence the same bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "prompt_cache.h"
#include "prompt_cache_disk.h"
#include "retnet/core/hash.h"
#include "retnet/infer/session.h"
#include "retnet/model/model.h"
#include "test_helpers.h"

namespace retnet::server {
namespace {

// max |a - b| / max |b| over one step's logits; NaN or Inf on either side gives +inf.
double logit_gap(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Steps sequences `rounded` (restored from a bf16 state) and `exact` (from the f32 one) through
// the same tokens: the gap after the first step, the largest, and the last.
struct Drift {
  double first = 0, worst = 0, last = 0;
};
Drift drift_over(Session& session, int64_t rounded, int64_t exact,
                 const std::vector<int32_t>& more) {
  Drift d;
  for (size_t t = 0; t < more.size(); ++t) {
    const int32_t step[2] = {more[t], more[t]};
    session.step(step);
    d.last = logit_gap(session.logits(rounded), session.logits(exact), session.vocab());
    if (t == 0) d.first = d.last;
    d.worst = std::max(d.worst, d.last);
  }
  return d;
}

// A session of two sequences on a small model: `a` has read a 300-token prompt (its state in
// `saved`), `b` is empty; `more` is 256 tokens to continue with.
struct Prefilled {
  Model model = Model::init(test::model_config(32, 64, 4, 48, 2, 40), 7);
  Session session{model, SessionOptions{.capacity = 2}};
  int64_t a = session.add_sequence(), b = session.add_sequence();
  std::vector<int32_t> prompt = tokens(300, 17, 3), more = tokens(256, 29, 11);
  SavedSequence saved = (session.prefill(a, prompt.data(), static_cast<int64_t>(prompt.size())),
                         session.snapshot(a));

  static std::vector<int32_t> tokens(size_t n, size_t step, size_t offset) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * step + offset) % 40);
    return t;
  }
};

TEST(PromptCacheBf16, HalvesTheBytesAndTheDriftStaysBounded) {
  Prefilled p;
  Session& session = p.session;
  const int64_t a = p.a, b = p.b;
  const std::vector<int32_t>&prompt = p.prompt, &more = p.more;
  const SavedSequence& saved = p.saved;

  PromptCache exact(1 << 26), half(1 << 26, true);
  exact.insert(prompt, saved);
  half.insert(prompt, saved);
  // Two bytes saved per state value (the logits, tokens and history stay as they are).
  EXPECT_EQ(exact.bytes() - half.bytes(),
            static_cast<int64_t>(2 * (saved.state.size() + saved.cache.size())));
  int64_t length = 0;
  const SavedSequence* from_half = half.find_longest_prefix(prompt, &length);
  ASSERT_TRUE(from_half && length == static_cast<int64_t>(prompt.size()));
  // Each value rounded to 8 significant bits: relative error at most 2^-8.
  ASSERT_EQ(from_half->state.size(), saved.state.size());
  for (size_t i = 0; i < saved.state.size(); ++i)
    ASSERT_LE(std::fabs(from_half->state[i] - saved.state[i]), std::fabs(saved.state[i]) / 256)
        << "state value " << i;
  session.restore(b, *from_half);
  const SavedSequence* from_exact = exact.find_longest_prefix(prompt, &length);
  ASSERT_TRUE(from_exact);
  session.restore(a, *from_exact);

  const Drift d = drift_over(session, b, a, more);
  EXPECT_GT(d.first, 0) << "the rounding changes something (else the test checks nothing)";
  EXPECT_LE(d.worst, 2e-2) << "first " << d.first << " last " << d.last;
  EXPECT_LE(d.last, d.first) << "the gap decays with the state";
}

// --cache-type bf16 with --cache-dir: the files hold bf16 states (two bytes a value fewer), a
// restarted server's lookup reads them back to exactly the state its memory tier would have
// given, with the same bounded drift; an f32 server reads them too, and a bf16 server f32 files.
TEST(PromptCacheBf16, TheDiskTierStoresBf16AndServesItAfterARestart) {
  Prefilled p;
  const Model& model = p.model;
  const uint64_t fingerprint = model_fingerprint(model);
  Session& session = p.session;
  const int64_t a = p.a, b = p.b;
  const std::vector<int32_t>&prompt = p.prompt, &more = p.more;
  const SavedSequence& saved = p.saved;

  const std::filesystem::path half_dir = test::fresh_temp_dir("prompt_cache_bf16_disk"),
                              exact_dir = test::fresh_temp_dir("prompt_cache_f32_disk");
  std::vector<std::string> log;
  auto disk = [&](const std::filesystem::path& dir, StateDtype dtype) {
    return std::make_unique<DiskPromptCache>(
        dir.string(), int64_t{1} << 30, model, fingerprint,
        [&log](const std::string& line) { log.push_back(line); }, dtype);
  };
  {
    PromptCache half(1 << 26, true), exact(1 << 26);
    half.attach_disk(disk(half_dir, StateDtype::BF16));
    exact.attach_disk(disk(exact_dir, StateDtype::F32));
    half.insert(prompt, saved);
    exact.insert(prompt, saved);
    half.disk()->flush();
    exact.disk()->flush();
    // Two bytes fewer per state value, and the header's type field (21 bytes) more.
    const int64_t field = static_cast<int64_t>(std::string(R"(,"state_dtype":"bf16")").size());
    EXPECT_EQ(exact.disk()->bytes() - half.disk()->bytes(),
              static_cast<int64_t>(2 * (saved.state.size() + saved.cache.size())) - field);
  }
  // What the memory tier alone gives: the state rounded to bf16 and widened back.
  PromptCache memory(1 << 26, true);
  memory.insert(prompt, saved);
  int64_t length = 0;
  const SavedSequence in_memory = *memory.find_longest_prefix(prompt, &length);

  PromptCache restarted(1 << 26, true);
  restarted.attach_disk(disk(half_dir, StateDtype::BF16));
  const SavedSequence* from_disk = restarted.find_longest_prefix(prompt, &length);
  ASSERT_TRUE(from_disk && length == static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(restarted.disk_hits(), 1);
  EXPECT_EQ(from_disk->state, in_memory.state) << "the file's state is the memory tier's";
  EXPECT_EQ(from_disk->logits, saved.logits) << "logits stay f32";
  EXPECT_EQ(from_disk->recent, saved.recent);
  session.restore(b, *from_disk);
  session.restore(a, saved);
  const Drift d = drift_over(session, b, a, more);
  EXPECT_GT(d.first, 0) << "the rounding changes something (else the test checks nothing)";
  EXPECT_LE(d.worst, 2e-2) << "first " << d.first << " last " << d.last;
  EXPECT_LE(d.last, d.first) << "the gap decays with the state";

  // Either kind of file serves a server of the other kind.
  PromptCache f32_reads_bf16(1 << 26);
  f32_reads_bf16.attach_disk(disk(half_dir, StateDtype::F32));
  const SavedSequence* hit = f32_reads_bf16.find_longest_prefix(prompt, &length);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->state, in_memory.state);
  PromptCache bf16_reads_f32(1 << 26, true);
  bf16_reads_f32.attach_disk(disk(exact_dir, StateDtype::BF16));
  hit = bf16_reads_f32.find_longest_prefix(prompt, &length);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->state, in_memory.state) << "an f32 file joins a bf16 memory tier rounded";
  for (const auto& line : log) EXPECT_EQ(line.find("skipping"), std::string::npos) << line;
  std::filesystem::remove_all(half_dir);
  std::filesystem::remove_all(exact_dir);
}

// A bf16 state file records its type; a damaged one, or one naming a type this engine does not
// read, is refused by name.
TEST(PromptCacheBf16, StateFilesRecordTheirTypeAndOthersAreRefused) {
  const Model model = Model::init(test::model_config(32, 64, 4, 48, 2, 40), 7);
  const uint64_t fingerprint = model_fingerprint(model);
  SavedSequence s;
  s.position = 2;
  s.state.assign(static_cast<size_t>(model.config().state_floats_per_sequence()), 0.1f);
  s.logits.assign(static_cast<size_t>(model.config().vocab_size), 1.f);
  s.recent = {1, 2};
  const std::string f32 = state_file_bytes(model, fingerprint, s);
  const std::string bf16 = state_file_bytes(model, fingerprint, s, StateDtype::BF16);
  EXPECT_EQ(f32.find("state_dtype"), std::string::npos) << "f32 files are as they were";
  EXPECT_NE(bf16.find(R"("state_dtype":"bf16")"), std::string::npos);
  const SavedSequence back = parse_state_file(bf16, "x.state", model, fingerprint);
  ASSERT_EQ(back.state.size(), s.state.size());
  for (float v : back.state) ASSERT_NEAR(v, 0.1f, 0.1f / 256);
  std::string truncated = bf16.substr(0, bf16.size() - 10);
  EXPECT_TRUE(test::throws_error_naming(
      [&] { parse_state_file(truncated, "x.state", model, fingerprint); }, {"x.state"}));
  // Another type, with a valid checksum: named, not guessed at.
  std::string other = bf16;
  other.replace(other.find(R"("bf16")"), 6, R"("fp8x")");
  other.resize(other.size() - 8);
  const uint64_t sum = fnv1a(other.data(), other.size());
  other.append(reinterpret_cast<const char*>(&sum), 8);
  EXPECT_TRUE(test::throws_error_naming(
      [&] { parse_state_file(other, "x.state", model, fingerprint); }, {"x.state", "'fp8x'"}));
}

}  // namespace
}  // namespace retnet::server
