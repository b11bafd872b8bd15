// The prompt cache's bf16 memory tier (--cache-type bf16): a state takes half the bytes, and
// the drift a rounded state causes is bounded. Claim checked: continuing the same 256 tokens after
// a state restored from the bf16 tier, every step's logits stay within 2e-2 (relative to their
// largest magnitude) of a run restored from the f32 tier, and the gap after the last token is no
// larger than after the first: the rounding decays with the state, it does not accumulate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "prompt_cache.h"
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

TEST(PromptCacheBf16, HalvesTheBytesAndTheDriftStaysBounded) {
  const Model model = Model::init(test::model_config(32, 64, 4, 48, 2, 40), 7);
  SessionOptions so;
  so.capacity = 2;
  Session session(model, so);
  const int64_t a = session.add_sequence(), b = session.add_sequence();
  std::vector<int32_t> prompt(300), more(256);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 17 + 3) % 40);
  for (size_t i = 0; i < more.size(); ++i) more[i] = static_cast<int32_t>((i * 29 + 11) % 40);
  session.prefill(a, prompt.data(), static_cast<int64_t>(prompt.size()));
  const SavedSequence saved = session.snapshot(a);

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

  const int64_t V = session.vocab();
  double first = 0, worst = 0, last = 0;
  for (size_t t = 0; t < more.size(); ++t) {
    const int32_t step[2] = {more[t], more[t]};
    session.step(step);
    last = logit_gap(session.logits(b), session.logits(a), V);
    if (t == 0) first = last;
    worst = std::max(worst, last);
  }
  EXPECT_GT(first, 0) << "the rounding changes something (else the test checks nothing)";
  EXPECT_LE(worst, 2e-2) << "first " << first << " last " << last;
  EXPECT_LE(last, first) << "the gap decays with the state";
}

}  // namespace
}  // namespace retnet::server
