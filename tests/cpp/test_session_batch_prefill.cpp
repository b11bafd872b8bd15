// A session prefills several sequences' segments in one pass (ragged lengths, each from its own
// position and state; the server reads the prompts that arrive together so): for every mixer and
// hybrid models, each sequence ends as a prefill of it alone leaves it (logits, position, the
// state the next step reads), and the sequences left out are untouched.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "mixer_cases.h"
#include "retnet/infer/session.h"
#include "retnet/model/model.h"
#include "test_helpers.h"

namespace retnet {
namespace {

class SessionBatchPrefill : public ::testing::TestWithParam<test::MixerCase> {};

std::vector<float> logits_of(const Session& s, int64_t b) {
  return {s.logits(b), s.logits(b) + s.vocab()};
}

// Sequence i of a session of four is first given head_lengths[i] tokens on its own (0: none),
// then a segment of segment_lengths[i] tokens (0: left out of the batched call), in the batch's
// order `order`. The reference session reads each segment alone with prefill().
struct BatchPlan {
  std::vector<int64_t> head_lengths, segment_lengths, order;
  int64_t prefill_block = 2048;
};

void expect_batch_matches_alone(const Model& m, const BatchPlan& plan) {
  const int64_t V = m.config().vocab_size, n = 4;
  SessionOptions options;
  options.capacity = n;
  options.prefill_block = plan.prefill_block;
  Session batched(m, options), alone(m, options);
  std::vector<std::vector<int32_t>> heads, segments;
  for (int64_t i = 0; i < n; ++i) {
    heads.push_back(test::tokens_of(plan.head_lengths[i], V, 10 + i));
    segments.push_back(test::tokens_of(plan.segment_lengths[i], V, 20 + i));
    for (Session* s : {&batched, &alone}) {
      s->add_sequence();
      s->prefill(i, heads[i].data(), plan.head_lengths[i]);
    }
  }
  std::vector<int64_t> sequences, lengths;
  std::vector<const int32_t*> tokens;
  for (const int64_t i : plan.order) {
    sequences.push_back(i);
    tokens.push_back(segments[i].data());
    lengths.push_back(plan.segment_lengths[i]);
    alone.prefill(i, segments[i].data(), plan.segment_lengths[i]);
  }
  std::vector<std::vector<float>> untouched(n);
  for (int64_t i = 0; i < n; ++i)
    if (plan.segment_lengths[i] == 0 && batched.has_logits(i)) untouched[i] = logits_of(batched, i);
  batched.prefill(sequences, tokens, lengths);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_EQ(batched.position(i), alone.position(i));
    ASSERT_EQ(batched.has_logits(i), alone.has_logits(i));
    if (!alone.has_logits(i)) continue;
    if (plan.segment_lengths[i] == 0) {
      EXPECT_EQ(logits_of(batched, i), untouched[i]) << "a sequence left out keeps its logits";
      continue;
    }
    // The products over all the tokens at once may round differently than over one prompt's.
    EXPECT_TRUE(test::close(logits_of(batched, i), logits_of(alone, i), 1e-5));
  }
  // The states the next step reads: every sequence steps on from where it is.
  std::vector<int32_t> next(n);
  for (int64_t i = 0; i < n; ++i) next[i] = static_cast<int32_t>((3 + 5 * i) % V);
  batched.step(next.data());
  alone.step(next.data());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_TRUE(test::close(logits_of(batched, i), logits_of(alone, i), 1e-5))
        << "sequence " << i << " after a step";
}

TEST_P(SessionBatchPrefill, RaggedSegmentsFromTheirOwnPositionsMatchEachAlone) {
  const Model m = test::perturbed_model(GetParam().config, 3);
  // Chunks of 8 tokens: segments that start mid-chunk (after 3 tokens), at a chunk boundary (after
  // 8) and at 0, of lengths within, across and at chunk boundaries; one sequence left out; the
  // call's order not the rows' order.
  expect_batch_matches_alone(m, {{3, 0, 8, 5}, {13, 9, 1, 0}, {2, 0, 1}});
  expect_batch_matches_alone(m, {{0, 0, 0, 0}, {16, 7, 8, 21}, {3, 1, 0, 2}});
}

TEST_P(SessionBatchPrefill, PassesHoldAtMostABlockAndALongerSegmentIsReadAlone) {
  const Model m = test::perturbed_model(GetParam().config, 4);
  // A block of 16 tokens: 9 + 6 in one pass, 12 in the next, 40 alone in blocks of 16.
  expect_batch_matches_alone(m, {{0, 5, 0, 2}, {9, 6, 12, 40}, {0, 1, 2, 3}, 16});
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, SessionBatchPrefill, ::testing::ValuesIn(test::mixer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SessionBatchPrefillInput, BadListsAreRefusedByName) {
  const Model m = Model::init(test::tiny_config(), 5);
  SessionOptions options;
  options.capacity = 2;
  Session s(m, options);
  s.add_sequence();
  s.add_sequence();
  const std::vector<int32_t> t = {1, 2, 3};
  const std::vector<const int32_t*> two = {t.data(), t.data()};
  const std::vector<int64_t> lengths = {3, 3};
  EXPECT_TRUE(test::throws_error_naming(
      [&] { s.prefill(std::vector<int64_t>{1, 1}, two, lengths); }, {"listed twice"}));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { s.prefill(std::vector<int64_t>{0, 2}, two, lengths); }, {"sequence 2 does not exist"}));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { s.prefill(std::vector<int64_t>{0}, two, lengths); }, {"1 sequences", "2 lengths"}));
  EXPECT_TRUE(test::throws_error_naming(
      [&] { s.prefill(std::vector<int64_t>{0, 1}, two, std::vector<int64_t>{3, -1}); },
      {"-1 tokens", "sequence 1"}));
  const std::vector<int32_t> bad = {1, 99};
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        s.prefill(std::vector<int64_t>{0, 1}, std::vector<const int32_t*>{t.data(), bad.data()},
                  std::vector<int64_t>{3, 2});
      },
      {"token id 99"}));
  EXPECT_EQ(s.position(0), 0) << "a refused call reads nothing";
}

}  // namespace
}  // namespace retnet
