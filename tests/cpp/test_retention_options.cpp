// The retention options that flash-linear-attention's RetNet uses (half-split rotation, plain
// retention without score normalisation, a head norm weight, no output gate, a q/k width apart
// from d, keys and values shared by groups of heads, a feature map of q and k): every form agrees with the parallel one, the gradients agree between the training forms
// and predict the loss change, and the pieces match their definitions.
#include <cmath>

#include "retnet/core/error.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/forward.h"
#include "retnet/model/hf_directory.h"
#include "retnet/infer/session.h"
#include "retnet/model/training.h"
#include "retnet/ops/rotation.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::model_logits;

namespace {

struct OptionSet {
  const char* name;
  void (*apply)(Config& c);
};

void fla_defaults(Config& c) {
  c.rotary = RotaryStyle::HalfSplit;
  c.normalize_scores = false;
  c.head_norm_weight = true;
  c.activation = Activation::Swish;
}

const OptionSet kOptionSets[] = {
    {"half_split", [](Config& c) { c.rotary = RotaryStyle::HalfSplit; }},
    {"unnormalised", [](Config& c) { c.normalize_scores = false; }},
    {"head_norm_weight", [](Config& c) { c.head_norm_weight = true; }},
    {"fla", fla_defaults},
    {"fla_no_gate",
     [](Config& c) {
       fla_defaults(c);
       c.output_gate = false;
     }},
    {"fla_wide_keys",
     [](Config& c) {
       fla_defaults(c);
       c.key_embed_dim = 2 * c.embed_dim;
     }},
    {"fla_narrow_keys_theta",
     [](Config& c) {
       fla_defaults(c);
       c.key_embed_dim = c.embed_dim / 2;
       c.rope_theta = 500.0;
     }},
    {"gqa_4q_2kv", [](Config& c) { c.kv_heads = 2; }},
    {"mqa_4q_1kv", [](Config& c) { c.kv_heads = 1; }},
    {"feature_map_relu", [](Config& c) { c.feature_map = QkFeatureMap::Relu; }},
    {"feature_map_swish", [](Config& c) { c.feature_map = QkFeatureMap::Swish; }},
    {"fla_gqa_feature_map",
     [](Config& c) {
       fla_defaults(c);
       c.kv_heads = 2;
       c.key_embed_dim = 2 * c.embed_dim;
       c.feature_map = QkFeatureMap::Gelu;
     }},
    {"fla_mqa_sigmoid_no_gate",
     [](Config& c) {
       fla_defaults(c);
       c.kv_heads = 1;
       c.output_gate = false;
       c.feature_map = QkFeatureMap::Sigmoid;
     }},
};

Config options_config(const OptionSet& o) {
  Config c = test::model_config(32, 64, 4, 48, 2, 40);
  c.layernorm_eps = 1e-6;
  o.apply(c);
  return c;
}

// Init gives every head norm weight 1; spread them so the weight matters.
Model options_model(const Config& c, uint64_t seed) {
  Model m = Model::init(c, seed);
  const std::vector<float> spread = test::random_vector(c.head_value_dim(), seed, 0.5, 7);
  for (const auto& L : m.tensors().layers)
    for (size_t i : L.mixer_tensors) {
      if (i == kNoTensor) continue;
      float* w = m.params().tensor(i);
      for (int64_t j = 0; j < c.head_value_dim(); ++j) w[j] += spread[j];
    }
  return m;
}

std::vector<int32_t> tokens_for(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + i / 3) % vocab);
  return t;
}

}  // namespace

class RetentionOptions : public ::testing::TestWithParam<OptionSet> {};

TEST_P(RetentionOptions, FormsAgree) {
  const Config c = options_config(GetParam());
  const Model m = options_model(c, 5);
  for (int64_t T : {1, 7, 70})
    for (int64_t B : {1, 3}) {
      auto tok = tokens_for(B * T, c.vocab_size);
      auto ref = model_logits(m, tok, B, Form::Parallel);
      SCOPED_TRACE(::testing::Message() << GetParam().name << " B=" << B << " T=" << T);
      EXPECT_TRUE(close(model_logits(m, tok, B, Form::Recurrent), ref, 1e-5)) << "recurrent";
      EXPECT_TRUE(close(model_logits(m, tok, B, Form::Scan), ref, 1e-5)) << "scan";
      for (int64_t chunk : {5, 64})
        EXPECT_TRUE(close(model_logits(m, tok, B, Form::Chunkwise, chunk), ref, 1e-5))
            << "chunk " << chunk;
    }
}

TEST_P(RetentionOptions, GradientsAgreeAndPredictTheLossChange) {
  Model m = options_model(options_config(GetParam()), 11);
  const int64_t B = 2, T = 19, V = m.config().vocab_size;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = (i * 7 + 3) % V, tgt[i] = (i * 11 + 1) % V;
  ParamBuffer gp(m.params().layout());
  test::expect_chunkwise_gradients_match(m, tok, tgt, B, T, 6, gp);
  // Every tensor receives a gradient, the head norm weight included.
  for (size_t i = 0; i < gp.layout().size(); ++i) {
    double n2 = 0;
    for (size_t j = 0; j < gp.layout()[i].numel; ++j) n2 += double(gp.tensor(i)[j]) * gp.tensor(i)[j];
    EXPECT_GT(n2, 0.0) << gp.layout()[i].name;
  }
  // (L(p + h g) - L(p - h g)) / 2h = |g|^2.
  double norm2 = 0;
  for (size_t i = 0; i < gp.size(); ++i) norm2 += double(gp.data()[i]) * gp.data()[i];
  // A step of 1e-4 in parameter space: without the gate's damping the loss curves enough that
  // 1e-3 leaves a 0.1% second-order error.
  const double h = 1e-4 / std::sqrt(norm2);
  std::vector<float> p0(m.params().data(), m.params().data() + m.params().size());
  Arena arena;
  auto loss_at = [&](double t) {
    for (size_t i = 0; i < p0.size(); ++i) m.params().data()[i] = p0[i] + float(t * gp.data()[i]);
    return loss_and_gradients(m, tok.data(), tgt.data(), B, T, {}, arena, nullptr);
  };
  EXPECT_NEAR((loss_at(h) - loss_at(-h)) / (2 * h), norm2, 5e-4 * norm2);
}

INSTANTIATE_TEST_SUITE_P(Fla, RetentionOptions, ::testing::ValuesIn(kOptionSets),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(RetentionOptions, UnnormalisedKernelIsPlainRetention) {
  // o_n = sum_m gamma^(n-m) (q_n . k_m) v_m, every form, against the double reference and the
  // literal sum.
  const int64_t T = 23, Dk = 4, Dv = 3;
  test::HeadInputs in(1, T, 1, Dk, Dv, 3, 1.0, 1.0);
  const double gamma = 0.9;
  std::vector<double> ref(T * Dv);
  retention_reference(in.q.data(), in.k.data(), in.v.data(), ref.data(), T, Dk, Dv, gamma, false);
  for (int64_t n = 0; n < T; ++n)
    for (int64_t j = 0; j < Dv; ++j) {
      double s = 0;
      for (int64_t m = 0; m <= n; ++m) {
        double dot = 0;
        for (int64_t i = 0; i < Dk; ++i) dot += double(in.q[n * Dk + i]) * in.k[m * Dk + i];
        s += std::pow(gamma, double(n - m)) * dot * in.v[m * Dv + j];
      }
      EXPECT_NEAR(ref[n * Dv + j], s, 1e-12 * (1 + std::fabs(s)));
    }
  std::vector<float> expect(ref.begin(), ref.end());
  for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise, Form::Scan}) {
    std::vector<float> out(T * Dv, NAN), state(Dk * (Dv + 1), 0.f);
    RetentionArgs a;
    a.q = in.view(in.q, Dk);
    a.k = in.view(in.k, Dk);
    a.v = in.view(in.v, Dv);
    a.out = in.view(out, Dv);
    a.gammas = &gamma;
    a.state = state.data();
    a.chunk = 5;
    a.normalize_scores = false;
    Arena arena(retention_workspace_floats(form, 1, T, 1, Dk, Dv, a.chunk, 0));
    retention_forward(form, a, arena);
    EXPECT_TRUE(close(out, expect, 1e-5)) << form_name(form);
  }
}

TEST(RetentionOptions, HalfSplitRotationPairsHalves) {
  // x[i] and x[i + Dk/2] rotate by n * base^(-2i/Dk), as GPT-NeoX's rotate_half.
  const int64_t Dk = 8, T = 5, half = Dk / 2;
  const std::vector<double> theta = half_split_rotation_thetas(Dk, 10000.0);
  for (int64_t i = 0; i < half; ++i) EXPECT_DOUBLE_EQ(theta[i], std::pow(10000.0, -2.0 * i / Dk));
  std::vector<float> x = test::random_vector(T * Dk, 4, 1.0, 0), y = x;
  std::vector<float> table(T * Dk);
  rotation_table(theta, 1, T, nullptr, table.data());
  rotate_with_table(y.data(), Dk, 1, T, 1, Dk, table.data(), 0, RotationDirection::Forward,
                    RotationPairs::HalfSplit);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double c = std::cos(t * theta[i]), s = std::sin(t * theta[i]);
      const double a = x[t * Dk + i], b = x[t * Dk + i + half];
      EXPECT_NEAR(y[t * Dk + i], a * c - b * s, 1e-6);
      EXPECT_NEAR(y[t * Dk + i + half], b * c + a * s, 1e-6);
    }
  rotate_with_table(y.data(), Dk, 1, T, 1, Dk, table.data(), 0, RotationDirection::Inverse,
                    RotationPairs::HalfSplit);
  EXPECT_TRUE(close(y, x, 1e-6));
}

TEST(RetentionOptions, ConfigRoundTripsAndOtherMixersRefuseThem) {
  Config c = options_config(kOptionSets[5]);
  const Config back = Config::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.key_embed_dim, 64);
  EXPECT_EQ(back.rotary, RotaryStyle::HalfSplit);
  EXPECT_FALSE(back.normalize_scores);
  EXPECT_TRUE(back.head_norm_weight);
  EXPECT_EQ(Model::init(c, 1).parameter_count(), c.parameter_count());
  EXPECT_THROW(Config::from_json(R"({"mixer": "linear", "normalize_scores": false})"), Error);
  EXPECT_THROW(Config::from_json(R"({"mixer": "aft", "output_gate": false})"), Error);
  EXPECT_THROW(Config::from_json(R"({"rotary": "neox"})"), Error);
  EXPECT_THROW(Config::from_json(R"({"rope_theta": -1})"), Error);
  EXPECT_THROW(Config::from_json(R"({"key_embed_dim": 30, "decoder_retention_heads": 4})"), Error);
}

TEST(RetentionOptions, KvHeadsAndFeatureMapRoundTripAndAreChecked) {
  Config c = options_config(kOptionSets[11]);  // fla_gqa_feature_map
  ASSERT_EQ(std::string(kOptionSets[11].name), "fla_gqa_feature_map");
  const Config back = Config::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.kv_heads, 2);
  EXPECT_EQ(back.feature_map, QkFeatureMap::Gelu);
  // k_proj and v_proj have a row block per kv head.
  const Model m = Model::init(c, 1);
  EXPECT_EQ(m.parameter_count(), c.parameter_count());
  const auto& L = m.tensors().layers[0];
  EXPECT_EQ(m.params().layout()[L.q_proj].shape[0], 64);
  EXPECT_EQ(m.params().layout()[L.k_proj].shape[0], 32);
  EXPECT_EQ(m.params().layout()[L.v_proj].shape[0], 32);
  EXPECT_EQ(c.projection_width(), 64 + 32 + 32 + 64);
  // The decode state stays per query head.
  EXPECT_EQ(c.state_floats_per_sequence(), c.layers * c.heads * c.key_dim() * (c.head_value_dim() + 1));
  // Defaults are not written.
  const std::string plain = options_config(kOptionSets[0]).to_json();
  EXPECT_EQ(plain.find("kv_heads"), std::string::npos);
  EXPECT_EQ(plain.find("feature_map"), std::string::npos);
  EXPECT_EQ(Config::from_json(R"({"feature_map": "silu"})").feature_map, QkFeatureMap::Swish);
  EXPECT_EQ(Config::from_json(R"({"feature_map": null})").feature_map, QkFeatureMap::None);
  EXPECT_EQ(Config::from_json(R"({"kv_heads": 4})").kv_groups(), 1);
  EXPECT_THROW(Config::from_json(R"({"kv_heads": 3})"), Error);
  EXPECT_THROW(Config::from_json(R"({"kv_heads": 8})"), Error);
  EXPECT_THROW(Config::from_json(R"({"kv_heads": -1})"), Error);
  try {
    Config::from_json(R"({"feature_map": "elu"})");
    ADD_FAILURE() << "feature_map elu accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("elu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Config::from_json(R"({"mixer": "linear", "kv_heads": 2})"), Error);
  EXPECT_THROW(Config::from_json(R"({"mixer": "attention", "feature_map": "relu"})"), Error);
}

TEST(RetentionOptions, GroupedHeadsEqualRepeatedKeysAndValues) {
  // A kv_heads model computes what the full-head model computes with each k_proj, v_proj row block
  // repeated for its group of query heads.
  Config cg = options_config(kOptionSets[11]), cf = cg;
  cf.kv_heads = 0;
  const Model g = options_model(cg, 3);
  Model f = Model::init(cf, 4);
  const int64_t G = cg.kv_groups(), dk = cg.key_dim(), dv = cg.head_value_dim(), d = cg.embed_dim;
  for (size_t i = 0; i < g.params().layout().size(); ++i) {
    const auto& t = g.params().layout()[i];
    const float* src = g.params().tensor(i);
    float* dst = f.params().tensor(i);
    const bool k = t.name.find("k_proj") != std::string::npos;
    if (!k && t.name.find("v_proj") == std::string::npos) {
      std::copy(src, src + t.numel, dst);
      continue;
    }
    const int64_t dh = k ? dk : dv, rows = t.shape[0];
    for (int64_t r = 0; r < rows * G; ++r) {
      const int64_t head = r / dh, src_row = (head / G) * dh + r % dh;
      std::copy(src + src_row * d, src + (src_row + 1) * d, dst + r * d);
    }
  }
  auto tok = tokens_for(2 * 9, cg.vocab_size);
  EXPECT_TRUE(close(model_logits(g, tok, 2, Form::Parallel), model_logits(f, tok, 2, Form::Parallel),
                    1e-5));
}

TEST(RetentionOptions, KvHeadsAndFeatureMapThroughFlaDirectories) {
  // Exported as fla's num_kv_heads and feature_map, loaded back: the same config and logits.
  const Config c = options_config(kOptionSets[11]);
  const Model m = options_model(c, 8);
  const auto dir = test::fresh_temp_dir("gqa_fla");
  save_hf_directory(m, dir.string(), HfFlavour::Fla, "f32", {});
  const Model back = load_hf_directory(dir.string());
  EXPECT_EQ(back.config().to_json(), c.to_json());
  auto tok = tokens_for(2 * 11, c.vocab_size);
  EXPECT_EQ(model_logits(back, tok, 2, Form::Chunkwise, 4), model_logits(m, tok, 2, Form::Chunkwise, 4));
  std::filesystem::remove_all(dir);
  // syncdoth has neither option: the export names it.
  for (const char* key : {"kv_heads", "feature_map"}) {
    Config s = test::model_config(32, 64, 4, 48, 2, 40);
    if (std::string(key) == "kv_heads") s.kv_heads = 2; else s.feature_map = QkFeatureMap::Relu;
    try {
      hf_config_json(s, HfFlavour::Syncdoth);
      ADD_FAILURE() << key << " exported to syncdoth";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // fla's null and num_heads mean no groups; an unknown feature map is refused naming key and value.
  const std::string base = R"({"hidden_size": 32, "num_hidden_layers": 1, "num_heads": 4, "vocab_size": 40)";
  EXPECT_EQ(parse_hf_config(base + R"(, "num_kv_heads": null})", "c").config.kv_heads, 0);
  EXPECT_EQ(parse_hf_config(base + R"(, "num_kv_heads": 4})", "c").config.kv_heads, 0);
  EXPECT_EQ(parse_hf_config(base + R"(, "num_kv_heads": 1})", "c").config.kv_heads, 1);
  EXPECT_EQ(parse_hf_config(base + R"(, "feature_map": "swish"})", "c").config.feature_map,
            QkFeatureMap::Swish);
  try {
    parse_hf_config(base + R"(, "feature_map": "mish"})", "c");
    ADD_FAILURE() << "feature_map mish accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'feature_map' = \"mish\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_hf_config(base + R"(, "num_kv_heads": 3})", "c"), Error);
}

TEST(RetentionOptions, GroupedHeadsDecodeStepByStep) {
  // A session's prefill and steps (state per query head, packed q|k|v|g weights) reproduce the
  // parallel form's logits of the whole sequence.
  for (size_t set : {8, 11}) {  // mqa_4q_1kv, fla_gqa_feature_map
    Model m = options_model(options_config(kOptionSets[set]), 9);
    m.prepare_decode(DecodePrecision::F32);
    const int64_t V = m.config().vocab_size, prompt = 5, steps = 6;
    const auto tok = tokens_for(prompt + steps, V);
    const auto ref = model_logits(m, tok, 1, Form::Parallel);
    Session session(m);
    session.add_sequence();
    session.prefill(0, tok.data(), prompt);
    for (int64_t i = 0; i < steps; ++i) {
      const std::vector<float> got(session.logits(0), session.logits(0) + V);
      const std::vector<float> want(ref.begin() + (prompt - 1 + i) * V, ref.begin() + (prompt + i) * V);
      EXPECT_TRUE(close(got, want, 1e-5)) << kOptionSets[set].name << " step " << i;
      session.step(&tok[prompt + i]);
    }
  }
}
