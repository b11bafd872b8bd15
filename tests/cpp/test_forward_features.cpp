// forward_features (retnet/model/forward.h): the final features are what the logits are projected
// from (features x output_projection^T = forward_logits, within float rounding), in the parallel
// and chunkwise forms alike, for a retention and a hybrid model with a token cache.
#include <cmath>

#include "retnet/model/forward.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::model_logits;

namespace {

std::vector<float> features_of(const Model& m, const std::vector<int32_t>& tok, int64_t B,
                               Form form) {
  const int64_t T = static_cast<int64_t>(tok.size()) / B;
  std::vector<float> out(tok.size() * m.config().embed_dim, NAN);
  ForwardOptions o;
  o.form = form;
  o.chunk = 5;  // does not divide T: a ragged last chunk
  Arena arena;
  forward_features(m, tok.data(), B, T, out.data(), o, arena);
  return out;
}

void check_features(const Model& m) {
  const Config& c = m.config();
  const int64_t B = 2, T = 13, d = c.embed_dim, V = c.vocab_size;
  std::vector<int32_t> tok(B * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 31 + 7) % V);
  const std::vector<float> f = features_of(m, tok, B, Form::Parallel);
  const float* w = m.params().tensor(m.tensors().output_projection);  // [vocab, d]
  std::vector<double> projected(static_cast<size_t>(B * T * V));
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double sum = 0;
      for (int64_t k = 0; k < d; ++k) sum += double(f[n * d + k]) * w[v * d + k];
      projected[n * V + v] = sum;
    }
  EXPECT_TRUE(close(model_logits(m, tok, B, Form::Parallel), projected, 1e-4));
  if (c.has_form(Form::Chunkwise))
    EXPECT_TRUE(close(features_of(m, tok, B, Form::Chunkwise), f, 1e-5));
}

TEST(ForwardFeatures, AreWhatTheLogitsAreProjectedFrom) {
  check_features(Model::init(test::tiny_config(), 11));
}

TEST(ForwardFeatures, OfAHybridWithATokenCache) {
  const Config c = Config::from_json(
      R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64, "decoder_retention_heads": 4,
          "decoder_ffn_embed_dim": 48, "decoder_layers": 2, "vocab_size": 64,
          "mixer": ["retention", {"mixer": "attention", "heads": 4, "value_dim": 32}]})",
      "hybrid");
  ASSERT_TRUE(c.keeps_tokens());
  check_features(Model::init(c, 5));
}

TEST(ForwardFeatures, RefuseTheRecurrentFormAndBadTokens) {
  const Model m = Model::init(test::tiny_config(), 11);
  std::vector<int32_t> tok = {1, 2, 3};
  std::vector<float> out(3 * m.config().embed_dim);
  ForwardOptions o;
  o.form = Form::Recurrent;
  Arena arena;
  EXPECT_TRUE(test::throws_error_naming(
      [&] { forward_features(m, tok.data(), 1, 3, out.data(), o, arena); }, {"recurrent"}));
  tok[1] = 99999;
  o.form = Form::Parallel;
  EXPECT_TRUE(test::throws_error_naming(
      [&] { forward_features(m, tok.data(), 1, 3, out.data(), o, arena); }, {"99999"}));
}

}  // namespace
