// A session steps any subset of its sequences in place (the server's generating slots while other
// slots read prompts), and rolls a sequence back (speculative decoding's rejected tokens): for
// every mixer and a hybrid model, both give exactly what a session holding only those sequences
// gives, and leave the other sequences untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/infer/session.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"
#include "session_cases.h"
#include "test_helpers.h"

namespace retnet {
namespace {

using RowsCase = test::SessionCase;

class SessionRows : public ::testing::TestWithParam<RowsCase> {};

const std::vector<int32_t> kPrompts[3] = {{1, 2, 3, 4, 5}, {6, 7, 8}, {9, 10, 11, 12, 13, 14, 15}};

// Bitwise equality of two sequences' logits (a NaN never equals).
::testing::AssertionResult same_logits(const Session& a, int64_t ia, const Session& b, int64_t ib) {
  for (int64_t v = 0; v < a.vocab(); ++v) {
    const float x = a.logits(ia)[v], y = b.logits(ib)[v];
    if (!(x == y) || !std::isfinite(x))
      return ::testing::AssertionFailure() << "logit " << v << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

TEST_P(SessionRows, ASubsetStepsInPlaceAsItsOwnSessionWould) {
  const Model m = Model::init(GetParam().config, 5);
  SessionOptions options;
  options.capacity = 3;
  Session all(m, options);
  for (int b = 0; b < 3; ++b) {
    all.add_sequence();
    all.prefill(b, kPrompts[b].data(), static_cast<int64_t>(kPrompts[b].size()));
  }
  // The reference holds sequences 2 and 0 alone, in that order, and steps them all.
  Session pair(m, options);
  for (int b : {2, 0}) {
    const int64_t i = pair.add_sequence();
    pair.prefill(i, kPrompts[b].data(), static_cast<int64_t>(kPrompts[b].size()));
  }
  const std::vector<float> untouched(all.logits(1), all.logits(1) + all.vocab());
  const int64_t position_1 = all.position(1);
  const std::vector<int64_t> rows = {2, 0};
  for (int t = 0; t < 3; ++t) {
    const std::vector<int32_t> tokens = {static_cast<int32_t>(16 + t),
                                         static_cast<int32_t>(20 + t)};
    all.step(rows, tokens.data());
    pair.step(tokens.data());
    EXPECT_TRUE(same_logits(all, 2, pair, 0)) << "step " << t;
    EXPECT_TRUE(same_logits(all, 0, pair, 1)) << "step " << t;
  }
  EXPECT_EQ(all.position(2), static_cast<int64_t>(kPrompts[2].size()) + 3);
  EXPECT_EQ(all.position(1), position_1) << "a sequence left out of the steps keeps its state";
  EXPECT_EQ(std::vector<float>(all.logits(1), all.logits(1) + all.vocab()), untouched);
  // It continues exactly as if the others had never stepped.
  Session alone(m, options);
  alone.add_sequence();
  alone.prefill(0, kPrompts[1].data(), static_cast<int64_t>(kPrompts[1].size()));
  const int32_t next = 3;
  all.step(std::vector<int64_t>{1}, &next);
  alone.step(&next);
  EXPECT_TRUE(same_logits(all, 1, alone, 0));
  EXPECT_EQ(all.state_bytes_copied(), 0) << "stepping chosen sequences copies no state";
}

TEST_P(SessionRows, ARepeatedOrMissingSequenceIsRefused) {
  const Model m = Model::init(GetParam().config, 5);
  SessionOptions options;
  options.capacity = 3;
  Session s(m, options);
  s.add_sequence();
  s.add_sequence();
  const int32_t tokens[2] = {1, 2};
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        s.step(std::vector<int64_t>{1, 1}, tokens);
      },
      {"sequence 1", "twice"}));
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        s.step(std::vector<int64_t>{0, 2}, tokens);
      },
      {"sequence 2 does not exist"}));
}

// Rolling back to a snapshot (or, for a model of caches alone, to a position) and taking other
// tokens gives what taking them from the start gives; a constant state without a snapshot is
// refused.
TEST_P(SessionRows, TruncateRollsBackExactly) {
  const Config& c = GetParam().config;
  const Model m = Model::init(c, 5);
  SessionOptions options;
  options.capacity = 2;
  Session s(m, options), fresh(m, options);
  s.add_sequence();
  fresh.add_sequence();
  const std::vector<int32_t>& prompt = kPrompts[2];
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  fresh.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  const SavedSequence mark = s.snapshot(0);
  const int64_t copied = s.state_bytes_copied();
  for (int32_t t : {21, 22, 23}) s.step(&t);  // the draft tokens a verifier rejects
  s.truncate(0, mark);
  EXPECT_EQ(s.position(0), static_cast<int64_t>(prompt.size()));
  EXPECT_TRUE(same_logits(s, 0, fresh, 0)) << "the snapshot's logits come back";
  EXPECT_EQ(s.state_bytes_copied() - copied,
            c.state_floats_per_sequence() * static_cast<int64_t>(sizeof(float)))
      << "only the constant state is copied back; cached tokens stay in place";
  for (int32_t t : {24, 25}) {
    s.step(&t);
    fresh.step(&t);
    EXPECT_TRUE(same_logits(s, 0, fresh, 0));
  }
  if (c.state_floats_per_sequence() == 0) {
    // Only a cache: dropping its tail is the whole rollback.
    for (int32_t t : {26, 27}) s.step(&t);
    s.truncate(0, s.position(0) - 2);
    EXPECT_FALSE(s.has_logits(0));
    const int32_t t = 28;
    s.step(&t);
    fresh.step(&t);
    EXPECT_TRUE(same_logits(s, 0, fresh, 0));
  } else {
    EXPECT_TRUE(
        test::throws_error_naming([&] { s.truncate(0, 1); }, {"constant-size state", "snapshot"}));
  }
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        Session later(m, options);
        later.add_sequence();
        later.prefill(0, prompt.data(), 2);
        later.truncate(0, mark);
      },
      {"cannot roll back"}));
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, SessionRows, ::testing::ValuesIn(test::session_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace retnet
