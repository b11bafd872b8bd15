// What a session copies of its sequences' states: snapshots, restores, forks and the sequences
// remove_sequence moves down, each counted once in bytes (a hybrid model: a constant state and a
// cache growing with the position).
#include <gtest/gtest.h>

#include <vector>

#include "retnet/infer/session.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"

namespace retnet {
namespace {

Model hybrid_model() {
  return Model::init(Config::from_json(R"({"decoder_embed_dim": 16, "decoder_value_embed_dim": 24,
    "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "vocab_size": 30,
    "decoder_layers": 2, "mixer": ["retention", {"mixer": "attention", "heads": 2}]})"),
                     3);
}

TEST(SessionCopies, EachCopyOfASequenceCountsItsBytesOnce) {
  const Model m = hybrid_model();
  SessionOptions options;
  options.capacity = 3;
  Session s(m, options);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8};
  s.add_sequence();
  s.add_sequence();
  s.prefill(0, a.data(), 5);
  s.prefill(1, b.data(), 3);
  EXPECT_EQ(s.state_bytes_copied(), 0) << "prefill copies nothing";
  const int64_t bytes_a = s.state_bytes(0), bytes_b = s.state_bytes(1);
  ASSERT_GT(bytes_a, bytes_b) << "the longer sequence caches more tokens";

  const SavedSequence saved = s.snapshot(0);
  EXPECT_EQ(s.state_bytes_copied(), bytes_a);
  s.add_sequence();
  s.restore(2, saved);
  EXPECT_EQ(s.state_bytes_copied(), 2 * bytes_a);
  s.fork(1, 2);
  EXPECT_EQ(s.state_bytes_copied(), 2 * bytes_a + bytes_b);
  // Removing sequence 0 moves sequences 1 and 2 (now a copy of b) down one index each.
  s.remove_sequence(0);
  EXPECT_EQ(s.state_bytes_copied(), 2 * bytes_a + 3 * bytes_b);
  // Removing the last one moves nothing.
  s.remove_sequence(1);
  EXPECT_EQ(s.state_bytes_copied(), 2 * bytes_a + 3 * bytes_b);
  const int32_t next = 9;
  s.step(&next);
  EXPECT_EQ(s.state_bytes_copied(), 2 * bytes_a + 3 * bytes_b) << "a step copies nothing";
}

}  // namespace
}  // namespace retnet
