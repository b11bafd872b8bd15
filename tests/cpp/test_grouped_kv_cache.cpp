// The KV cache of attention with kv heads shared by groups of query heads (GQA; fla's
// num_kv_heads): each kv head is cached once and the kernels share it across its group. The
// kernels against the same keys and values expanded to every query head (bit for bit), a model's
// decode against its parallel form, cache bytes in proportion to the kv heads, and a hybrid model
// whose attention layers cache different widths.
#include <gtest/gtest.h>

#include <cmath>

#include "retnet/core/arena.h"
#include "retnet/infer/session.h"
#include "retnet/infer/state_file.h"
#include "retnet/mixers/attention.h"
#include "retnet/model/forward.h"
#include "retnet/model/state.h"
#include "test_helpers.h"

using namespace retnet;

namespace {

TensorView slice(std::vector<float>& x, int64_t B, int64_t T, int64_t H, int64_t D, int64_t t0,
                 int64_t n) {
  return TensorView::contiguous(x.data(), {B, T, H, D}).slice(1, t0, t0 + n);
}

// [B, T, Hkv, D] -> [B, T, H, D]: kv head j copied to query heads j G .. j G + G - 1.
std::vector<float> expand(const std::vector<float>& x, int64_t BT, int64_t Hkv, int64_t G,
                          int64_t D) {
  std::vector<float> out(BT * Hkv * G * D);
  for (int64_t n = 0; n < BT; ++n)
    for (int64_t h = 0; h < Hkv * G; ++h)
      for (int64_t i = 0; i < D; ++i) out[(n * Hkv * G + h) * D + i] = x[(n * Hkv + h / G) * D + i];
  return out;
}

// Prefill of `T0` tokens then steps to T, every output [B, T, H, Dv].
std::vector<float> run_cache(std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                             int64_t B, int64_t T, int64_t T0, int64_t H, int64_t Hkv, int64_t Dk,
                             int64_t Dv, int64_t window, int64_t* cache_floats) {
  test::OwnedCache<AttentionCache> c(B);
  std::vector<float> out(B * T * H * Dv, NAN);
  Arena arena(attention_workspace_floats(T0, Dk, Dv, 8) +
              attention_step_workspace_floats(B, H, Dv));
  attention_cache_reserve(c.cache, c.storage, B, Hkv, Dk, Dv, T);
  attention_prefill(slice(q, B, T, H, Dk, 0, T0), slice(k, B, T, Hkv, Dk, 0, T0),
                    slice(v, B, T, Hkv, Dv, 0, T0), slice(out, B, T, H, Dv, 0, T0), c.cache, arena,
                    8, window);
  for (int64_t t = T0; t < T; ++t) {
    arena.reset();
    attention_step(slice(q, B, T, H, Dk, t, 1), slice(k, B, T, Hkv, Dk, t, 1),
                   slice(v, B, T, Hkv, Dv, t, 1), slice(out, B, T, H, Dv, t, 1), c.cache, arena,
                   window);
  }
  *cache_floats = static_cast<int64_t>(c.storage.size());
  return out;
}

std::vector<int32_t> kv_test_tokens(int64_t T, int64_t vocab) {
  std::vector<int32_t> t(T);
  for (int64_t i = 0; i < T; ++i) t[i] = static_cast<int32_t>((i * 29 + 3) % vocab);
  return t;
}

}  // namespace

TEST(GroupedKvCache, KernelsEqualTheExpandedKeysAndValuesBitForBit) {
  const int64_t B = 2, T = 21, T0 = 13, H = 6, Hkv = 2, G = 3, Dk = 8, Dv = 5;
  for (int64_t window : {0, 4}) {
    SCOPED_TRACE(window);
    auto q = test::random_vector(B * T * H * Dk, 1);
    auto k = test::random_vector(B * T * Hkv * Dk, 2);
    auto v = test::random_vector(B * T * Hkv * Dv, 3);
    auto k_all = expand(k, B * T, Hkv, G, Dk), v_all = expand(v, B * T, Hkv, G, Dv);
    int64_t grouped_floats = 0, expanded_floats = 0;
    const auto grouped = run_cache(q, k, v, B, T, T0, H, Hkv, Dk, Dv, window, &grouped_floats);
    const auto expanded =
        run_cache(q, k_all, v_all, B, T, T0, H, H, Dk, Dv, window, &expanded_floats);
    for (float x : grouped) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(grouped, expanded);
    EXPECT_EQ(expanded_floats, G * grouped_floats);  // the cache holds each kv head once
  }
}

TEST(GroupedKvCache, ModelDecodesAsItsParallelFormWithCacheBytesByKvHeads) {
  auto config = [](int64_t kv_heads) {
    Config c = test::model_config(32, 32, 8, 48, 2, 50);
    c.mixer = &find_mixer("attention");
    test::set_mixer_options(c, fmt::format(R"({{"attention": {{"kv_heads": {}}}}})", kv_heads));
    c.rotary = RotaryStyle::HalfSplit;
    return c;
  };
  // Cache floats per token: 2 layers x (keys + values of the kv heads), d_k = d_v = 4.
  for (int64_t kv : {1, 2, 8}) EXPECT_EQ(config(kv).cache_floats_per_token(), 2 * kv * (4 + 4));
  const Model m = Model::init(config(2), 11);
  const std::vector<int32_t> tokens = kv_test_tokens(30, 50);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = 50;
  std::vector<float> want(T * V);
  Arena arena;
  forward_logits(m, tokens.data(), 1, T, want.data(), {}, arena);
  Session s(m);
  s.add_sequence();
  s.prefill(0, tokens.data(), 12);
  std::vector<float> got(want.begin(), want.begin() + 11 * V);  // the prefill's last only
  got.insert(got.end(), s.logits(0), s.logits(0) + V);
  for (int64_t t = 12; t < T; ++t) {
    s.step(&tokens[t]);
    got.insert(got.end(), s.logits(0), s.logits(0) + V);
  }
  EXPECT_TRUE(test::close(got, want, 1e-5));
  EXPECT_EQ(s.state_bytes(0), T * 2 * 2 * (4 + 4) * 4);
}

TEST(GroupedKvCache, AttentionLayersOfAHybridModelCacheTheirOwnWidths) {
  const Config c = Config::from_json(R"({"decoder_embed_dim": 16, "decoder_value_embed_dim": 24,
    "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "vocab_size": 30,
    "decoder_layers": 3, "mixer": [{"mixer": "attention", "heads": 4, "kv_heads": 1},
      "retention", {"mixer": "attention", "heads": 2, "value_dim": 8}]})");
  State state(c, 2);
  // Layer 0: one kv head of d_k 4 and d_v 6; layer 2: two heads of d_k 8 and d_v 4.
  EXPECT_EQ(state.cache.row_floats, (std::vector<int64_t>{4 + 6, 2 * (8 + 4)}));
  EXPECT_EQ(c.cache_floats_per_token(), 10 + 24);
  const Model m = Model::init(c, 5);
  const std::vector<int32_t> tokens = kv_test_tokens(19, 30);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = 30;
  std::vector<float> want(T * V);
  Arena arena;
  forward_logits(m, tokens.data(), 1, T, want.data(), {}, arena);
  SessionOptions options;
  options.capacity = 2;
  Session s(m, options);
  s.add_sequence();
  s.prefill(0, tokens.data(), 7);
  std::vector<float> got(want.begin(), want.begin() + 6 * V);
  got.insert(got.end(), s.logits(0), s.logits(0) + V);
  for (int64_t t = 7; t < T; ++t) {
    s.step(&tokens[t]);
    got.insert(got.end(), s.logits(0), s.logits(0) + V);
  }
  EXPECT_TRUE(test::close(got, want, 1e-5));
  // A snapshot holds each layer's rows at its width, and restores to the same continuation.
  const SavedSequence saved = s.snapshot(0);
  EXPECT_EQ(static_cast<int64_t>(saved.cache.size()), T * (10 + 24));
  s.add_sequence();
  s.restore(1, saved);
  const int32_t next[2] = {4, 4};
  s.step(next);
  EXPECT_EQ(std::vector<float>(s.logits(0), s.logits(0) + V),
            std::vector<float>(s.logits(1), s.logits(1) + V));
}
