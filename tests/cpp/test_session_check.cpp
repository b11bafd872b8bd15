// Speculative decoding's check and rollback: a session feeds a sequence several tokens in one
// pass and keeps any prefix of them. For every mixer and a hybrid model, the logits of each
// checked token are those of plain steps, and the sequence after accepting j + 1 of them is the
// one those tokens fed one by one give: state, cache, logits, and what it continues with.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
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

class SessionCheck : public ::testing::TestWithParam<test::SessionCase> {};

const std::vector<int32_t> kCheckOther = {9, 10, 11, 12, 13};
const std::vector<int32_t> kCheckPrompt = {1, 2, 3, 4, 5, 6, 7};
const std::vector<int32_t> kCheckTokens = {21, 3, 17, 8, 29};  // the last token and 4 drafted ones

std::vector<float> row_logits(const Session& s, int64_t b) {
  return std::vector<float>(s.logits(b), s.logits(b) + s.vocab());
}

// A session holding kCheckOther at 0 and kCheckPrompt at 1: the checked sequence is not the first
// row of the state or of a cache.
void start_pair(Session& s) {
  s.add_sequence();
  s.add_sequence();
  s.prefill(0, kCheckOther.data(), static_cast<int64_t>(kCheckOther.size()));
  s.prefill(1, kCheckPrompt.data(), static_cast<int64_t>(kCheckPrompt.size()));
}

// A session of two sequences (capacity 2), started by start_pair.
std::unique_ptr<Session> started_pair(const Model& m) {
  SessionOptions options;
  options.capacity = 2;
  auto s = std::make_unique<Session>(m, options);
  start_pair(*s);
  return s;
}

TEST_P(SessionCheck, AcceptingAPrefixEqualsFeedingItTokenByToken) {
  const Model m = Model::init(GetParam().config, 7);
  SessionOptions options;
  options.capacity = 2;
  // The reference: the same tokens stepped one by one, its sequence after each.
  Session ref(m, options);
  start_pair(ref);
  const int64_t n = static_cast<int64_t>(kCheckTokens.size());
  std::vector<SavedSequence> after;
  for (int64_t i = 0; i < n; ++i) {
    ref.step(std::vector<int64_t>{1}, &kCheckTokens[i]);
    after.push_back(ref.snapshot(1));
  }
  for (int64_t j = 0; j < n; ++j) {
    SCOPED_TRACE("accepting " + std::to_string(j + 1) + " of " + std::to_string(n));
    Session s(m, options);
    start_pair(s);
    const std::vector<float> other = row_logits(s, 0);
    const float* rows = s.check(1, kCheckTokens.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(test::close(std::vector<float>(rows + i * s.vocab(), rows + (i + 1) * s.vocab()),
                              after[i].logits, 1e-5))
          << "logits after checked token " << i;
    s.accept(1, n - 1 - j);  // any prefix may be taken, and another one after it
    s.accept(1, j);
    // Every way of reading the state sees the accepted prefix's: in place, and in a snapshot.
    const int64_t S = GetParam().config.state_floats_per_sequence();
    EXPECT_TRUE(
        test::close(std::vector<float>(s.state_data(1), s.state_data(1) + S), after[j].state, 1e-6))
        << "state in place";
    const SavedSequence got = s.snapshot(1);
    EXPECT_EQ(got.position, static_cast<int64_t>(kCheckPrompt.size()) + j + 1);
    EXPECT_TRUE(test::close(got.state, after[j].state, 1e-6)) << "constant state";
    EXPECT_TRUE(test::close(got.cache, after[j].cache, 1e-6)) << "cached tokens";
    EXPECT_TRUE(test::close(got.logits, after[j].logits, 1e-5)) << "logits";
    EXPECT_EQ(got.recent, after[j].recent);
    EXPECT_EQ(row_logits(s, 0), other) << "the other sequence is untouched";
    {  // a sequence removed before it moves down with the accepted state
      Session moved(m, options);
      start_pair(moved);
      moved.check(1, kCheckTokens.data(), n);
      moved.accept(1, j);
      moved.remove_sequence(0);
      EXPECT_TRUE(test::close(moved.snapshot(0).state, after[j].state, 1e-6)) << "moved down";
    }
    // It continues as the reference does from there.
    Session cont(m, options);
    start_pair(cont);
    for (int64_t i = 0; i <= j; ++i) cont.step(std::vector<int64_t>{1}, &kCheckTokens[i]);
    for (int32_t t : {4, 19}) {
      s.step(std::vector<int64_t>{1}, &t);
      cont.step(std::vector<int64_t>{1}, &t);
      EXPECT_TRUE(test::close(row_logits(s, 1), row_logits(cont, 1), 1e-5)) << "after token " << t;
    }
  }
}

// The rollback keeps no state per checked token: a check copies the sequence's constant state once
// (where it started) and keeping a prefix writes it once, whatever the number of tokens checked.
TEST_P(SessionCheck, RollbackCopiesTheStateTwiceWhateverTheLength) {
  const Model m = Model::init(GetParam().config, 7);
  const int64_t S = GetParam().config.state_floats_per_sequence();
  for (int64_t n : {2, 5}) {
    SCOPED_TRACE("checking " + std::to_string(n) + " tokens");
    const std::unique_ptr<Session> owner = started_pair(m);
    Session& s = *owner;
    const int64_t before = s.state_bytes_copied();
    s.check(1, kCheckTokens.data(), n);
    s.accept(1, 0);
    s.step(std::vector<int64_t>{1}, &kCheckTokens[1]);  // reads the state: the prefix's comes in
    EXPECT_EQ(s.state_bytes_copied() - before, 2 * S * static_cast<int64_t>(sizeof(float)));
  }
}

TEST_P(SessionCheck, AcceptNeedsItsCheck) {
  const Model m = Model::init(GetParam().config, 7);
  const std::unique_ptr<Session> owner = started_pair(m);
  Session& s = *owner;
  EXPECT_TRUE(test::throws_error_naming([&] { s.accept(1, 0); }, {"needs a check"}));
  s.check(1, kCheckTokens.data(), 3);
  EXPECT_TRUE(test::throws_error_naming([&] { s.accept(0, 0); }, {"sequence 0", "needs a check"}));
  EXPECT_TRUE(test::throws_error_naming([&] { s.accept(1, 3); }, {"token 3", "3 tokens"}));
  EXPECT_TRUE(
      test::throws_error_naming([&] { s.check(1, kCheckTokens.data(), 0); }, {"one token"}));
  s.accept(1, 1);
  s.accept(1, 0);
  EXPECT_EQ(s.position(1), static_cast<int64_t>(kCheckPrompt.size()) + 1);
  s.step(std::vector<int64_t>{1}, &kCheckTokens[1]);
  EXPECT_TRUE(test::throws_error_naming([&] { s.accept(1, 0); }, {"needs a check"}))
      << "a step ends what a check can roll back";
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, SessionCheck, ::testing::ValuesIn(test::session_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace retnet
