// The whole model's logits agree across the four forms: max|a-b| / max|a| <= 1e-5 in float32, at
// eps 0 and 1e-6, T in {1, 7, 64, 513, 2048}, chunk sizes that divide T and that don't, B in {1, 3},
// heads in {1, 4, 8}.
#include <cmath>
#include <cstring>

#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/model/forward.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::model_logits;

namespace {

Config small_config(int64_t heads, double eps) {
  Config c;
  c.embed_dim = 32;
  c.value_embed_dim = 64;
  c.heads = heads;
  c.ffn_dim = 48;
  c.layers = 2;
  c.vocab_size = 40;
  c.layernorm_eps = eps;
  c.activation = Activation::Swish;
  return c;
}

// torchscale's init gives scores well below the normalisation's clamp; scaling q and k up makes
// max(|r_n| / sqrt(S_n), 1) take both branches, so the comparison covers the whole definition.
Model make_model(const Config& c, uint64_t seed, float qk_gain) {
  Model m = Model::init(c, seed);
  for (const auto& L : m.tensors().layers)
    for (size_t idx : {L.q_proj, L.k_proj}) {
      float* w = m.params().tensor(idx);
      for (size_t i = 0; i < m.params().layout()[idx].numel; ++i) w[i] *= qk_gain;
    }
  return m;
}

std::vector<int32_t> forms_tokens_for(int64_t B, int64_t T, int64_t vocab) {
  std::vector<int32_t> t(B * T);
  for (int64_t i = 0; i < B * T; ++i) t[i] = static_cast<int32_t>((i * 7919 + i / 3) % vocab);
  return t;
}

void check_all_forms(const Model& m, int64_t B, int64_t T) {
  auto tok = forms_tokens_for(B, T, m.config().vocab_size);
  auto ref = model_logits(m, tok, B, Form::Parallel);
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " H=" << m.config().heads
                                    << " eps=" << m.config().layernorm_eps);
  EXPECT_TRUE(close(model_logits(m, tok, B, Form::Recurrent), ref, 1e-5)) << "recurrent";
  EXPECT_TRUE(close(model_logits(m, tok, B, Form::Scan), ref, 1e-5)) << "scan";
  // A chunk that divides T (T itself, or 64 | T), and ones that do not.
  std::vector<int64_t> chunks = {T, 5, 64};
  if (T % 64 == 0) chunks.push_back(32);
  for (int64_t chunk : chunks)
    EXPECT_TRUE(close(model_logits(m, tok, B, Form::Chunkwise, chunk), ref, 1e-5))
        << "chunkwise, chunk " << chunk;
}

}  // namespace

class ModelForms : public ::testing::TestWithParam<std::tuple<int64_t, double>> {};

TEST_P(ModelForms, AgreeOnLogits) {
  auto [heads, eps] = GetParam();
  for (float gain : {1.f, 3.f}) {
    Model m = make_model(small_config(heads, eps), 17 + heads, gain);
    for (int64_t T : {1, 7, 64, 513})
      for (int64_t B : {1, 3}) check_all_forms(m, B, T);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadsAndEps, ModelForms,
                         ::testing::Combine(::testing::Values(1, 4, 8), ::testing::Values(0.0, 1e-6)));

TEST(ModelFormsSlow, AgreeOnLogitsAt2048) {
  for (int64_t heads : {1, 4, 8})
    for (double eps : {0.0, 1e-6}) {
      Model m = make_model(small_config(heads, eps), 5, 3.f);
      for (int64_t B : {1, 3}) check_all_forms(m, B, 2048);
    }
}

TEST(ModelForms, ChunkedPrefillContinuesTheState) {
  // Two chunkwise calls through one state equal one call; then recurrent steps continue it.
  Model m = make_model(small_config(4, 1e-6), 3, 3.f);
  const int64_t B = 2, T = 40, V = m.config().vocab_size;
  auto tok = forms_tokens_for(B, T, V);
  auto ref = model_logits(m, tok, B, Form::Parallel);
  State state(m.config(), B);
  Arena arena;
  std::vector<float> out(B * T * V);
  ForwardOptions o;
  o.form = Form::Chunkwise;
  o.chunk = 8;
  const int64_t T1 = 17, T2 = 12;
  for (auto [t0, len, form] : {std::tuple<int64_t, int64_t, Form>{0, T1, Form::Chunkwise},
                               {T1, T2, Form::Scan},
                               {T1 + T2, T - T1 - T2, Form::Recurrent}}) {
    std::vector<int32_t> part(B * len);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len; ++t) part[b * len + t] = tok[b * T + t0 + t];
    std::vector<float> lo(B * len * V);
    o.form = form;
    forward_logits(m, part.data(), B, len, lo.data(), o, arena, &state);
    for (int64_t b = 0; b < B; ++b)
      std::copy(lo.begin() + b * len * V, lo.begin() + (b + 1) * len * V,
                out.begin() + (b * T + t0) * V);
  }
  EXPECT_EQ(state.positions[0], T);
  EXPECT_TRUE(close(out, ref, 1e-5));
}

TEST(ModelForms, RejectsOutOfRangeTokens) {
  Model m = make_model(small_config(1, 0.0), 1, 1.f);
  std::vector<int32_t> tok = {1, 2, 40};
  std::vector<float> out(3 * 40);
  Arena arena;
  EXPECT_THROW(forward_logits(m, tok.data(), 1, 3, out.data(), ForwardOptions{}, arena), Error);
  tok[2] = -1;
  EXPECT_THROW(forward_logits(m, tok.data(), 1, 3, out.data(), ForwardOptions{}, arena), Error);
}

TEST(ModelForms, InitIsDeterministicAndThreadIndependent) {
  Config c = small_config(4, 1e-6);
  // Large enough for the parallel initialisation loop; drawn with 1 and with 2 threads.
  c.vocab_size = 4096;
  set_num_threads(1);
  Model a = Model::init(c, 42);
  set_num_threads(2);
  Model b = Model::init(c, 42), other = Model::init(c, 43);
  set_num_threads(0);
  ASSERT_EQ(a.params().size(), b.params().size());
  EXPECT_EQ(0, std::memcmp(a.params().data(), b.params().data(), a.params().size() * 4));
  EXPECT_NE(0, std::memcmp(a.params().data(), other.params().data(), a.params().size() * 4));
  // torchscale's init: q_proj ~ xavier_uniform(gain 2^-2.5), RMSNorm weights 1.
  const auto& L = a.tensors().layers[0];
  double bound = std::pow(2.0, -2.5) * std::sqrt(6.0 / (32 + 32));
  const float* q = a.param(L.q_proj);
  double maxabs = 0;
  for (int i = 0; i < 32 * 32; ++i) maxabs = retnet::test::max_keep_nan(maxabs, std::fabs(double(q[i])));
  EXPECT_LE(maxabs, bound);
  EXPECT_GT(maxabs, 0.9 * bound);
  EXPECT_EQ(a.param(L.mixer_norm)[5], 1.f);
}
