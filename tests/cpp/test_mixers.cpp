// The model with every mixer of the family (config "mixer"), and hybrid models (a "mixer" list:
// retention with attention layers, with their own attention options): its forms agree, its
// gradients match the loss, a short training run lowers the validation loss, greedy decoding
// equals the argmax of the parallel form, and a saved state (or cache) continues like one run.
// The kernels have their own tests; these check the wiring into blocks, training, sessions and
// state files.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "mixer_cases.h"
#include "retnet/core/error.h"
#include "retnet/infer/session.h"
#include "retnet/model/forward.h"
#include "retnet/model/model_io.h"
#include "retnet/model/training.h"
#include "retnet/train/optimizer.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::mixer_cases;
using retnet::test::mixer_config;
using retnet::test::MixerCase;
using retnet::test::model_logits;
using retnet::test::perturbed_model;
using retnet::test::tokens_of;

namespace {

class Mixers : public ::testing::TestWithParam<MixerCase> {
 protected:
  const Config& cfg() const { return GetParam().config; }
};

std::string mixer_test_name(const ::testing::TestParamInfo<MixerCase>& info) {
  return info.param.name;
}

}  // namespace

TEST_P(Mixers, FormsAgree) {
  const Model m = perturbed_model(cfg(), 3);
  const int64_t B = 2, T = 37;
  const auto tok = tokens_of(B * T, m.config().vocab_size, 1);
  const auto parallel = model_logits(m, tok, B, Form::Parallel);
  EXPECT_TRUE(close(model_logits(m, tok, B, Form::Recurrent), parallel, 1e-5));
  if (cfg().has_form(Form::Chunkwise)) {
    for (int64_t chunk : {1, 8, 64})
      EXPECT_TRUE(close(model_logits(m, tok, B, Form::Chunkwise, chunk), parallel, 1e-5))
          << "chunk " << chunk;
  } else {
    Arena arena;
    std::vector<float> out(tok.size() * m.config().vocab_size);
    ForwardOptions o;
    o.form = Form::Chunkwise;
    try {
      forward_logits(m, tok.data(), B, T, out.data(), o, arena);
      ADD_FAILURE() << "chunkwise ran for a mixer without that form";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no chunkwise form"), std::string::npos) << e.what();
    }
  }
}

TEST_P(Mixers, PrefillInPiecesThenDecodeEqualsParallel) {
  // A session's way through a sequence: the prefill form in pieces, then recurrent steps.
  const Model m = perturbed_model(cfg(), 4);
  const int64_t T = 40;
  const auto tok = tokens_of(T, m.config().vocab_size, 2);
  const auto parallel = model_logits(m, tok, 1, Form::Parallel);
  const int64_t V = m.config().vocab_size;
  State state(m.config(), 1);
  Arena arena;
  ForwardOptions pre;
  pre.form = cfg().prefill_form();
  std::vector<float> got(T * V);
  forward_logits(m, tok.data(), 1, 13, got.data(), pre, arena, &state);
  forward_logits(m, tok.data() + 13, 1, 11, got.data() + 13 * V, pre, arena, &state);
  ForwardOptions rec;
  rec.form = Form::Recurrent;
  forward_logits(m, tok.data() + 24, 1, T - 24, got.data() + 24 * V, rec, arena, &state);
  EXPECT_TRUE(close(got, parallel, 1e-5));
  EXPECT_EQ(state.positions[0], T);
}

TEST_P(Mixers, GradientOfEveryTensorPredictsTheLossChange) {
  // For each tensor: moving it along its own gradient changes the loss by |g|^2 per unit step.
  Model m = perturbed_model(cfg(), 5);
  const int64_t B = 2, T = 21;
  const auto tok = tokens_of(B * T, m.config().vocab_size, 3);
  const auto tgt = tokens_of(B * T, m.config().vocab_size, 4);
  Arena arena;
  ParamBuffer g(m.params().layout());
  loss_and_gradients(m, tok.data(), tgt.data(), B, T, TrainingOptions{}, arena, &g);
  const auto& layout = m.params().layout();
  // Layer 0's tensors, and those of every layer whose mixer differs from the one before it.
  auto checked_layer = [&](const std::string& name) {
    if (name.rfind("layers.", 0) != 0) return name == "embed_tokens.weight";
    const int64_t l = std::stoll(name.substr(7));
    return l == 0 || &m.config().layer_mixer(l) != &m.config().layer_mixer(l - 1);
  };
  int checked = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const std::string& name = layout[i].name;
    if (!checked_layer(name)) continue;
    float* p = m.params().tensor(i);
    const float* gi = g.tensor(i);
    double norm2 = 0;
    for (size_t j = 0; j < layout[i].numel; ++j) norm2 += double(gi[j]) * gi[j];
    if (name.find("feature_matrix") != std::string::npos) {
      EXPECT_EQ(norm2, 0.0) << "the Performer's random matrix is not trained";
      continue;
    }
    ASSERT_GT(norm2, 0.0) << name;
    std::vector<float> p0(p, p + layout[i].numel);
    const double h = 1e-3 / std::sqrt(norm2);
    auto loss_at = [&](double t) {
      for (size_t j = 0; j < p0.size(); ++j) p[j] = p0[j] + static_cast<float>(t * gi[j]);
      return loss_and_gradients(m, tok.data(), tgt.data(), B, T, TrainingOptions{}, arena, nullptr);
    };
    const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
    std::copy(p0.begin(), p0.end(), p);
    EXPECT_NEAR(fd, norm2, 2e-3 * norm2 + 1e-7) << name;
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

TEST_P(Mixers, ParallelAndChunkwiseGradientsAgree) {
  if (!cfg().trains_with(Form::Chunkwise)) {
    Model m = perturbed_model(cfg(), 6);
    const auto tok = tokens_of(10, m.config().vocab_size, 5);
    Arena arena;
    TrainingOptions o;
    o.form = Form::Chunkwise;
    EXPECT_THROW(loss_and_gradients(m, tok.data(), tok.data(), 1, 10, o, arena, nullptr), Error);
    return;
  }
  Model m = perturbed_model(cfg(), 6);
  const int64_t B = 2, T = 29;
  const auto tok = tokens_of(B * T, m.config().vocab_size, 5);
  const auto tgt = tokens_of(B * T, m.config().vocab_size, 6);
  ParamBuffer gp(m.params().layout());
  test::expect_chunkwise_gradients_match(m, tok, tgt, B, T, 8, gp);
}

TEST_P(Mixers, ShortTrainingLowersTheValidationLoss) {
  // A repeating pattern with a period the mixer must look back over; train on some windows,
  // validate on others.
  Config c = cfg();
  Model m = Model::init(c, 7);
  const int64_t B = 4, T = 32, V = c.vocab_size;
  auto window = [&](int64_t start, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t <= T; ++t) {
        const int64_t i = start + b * 5 + t;
        const int32_t v = static_cast<int32_t>((i % 7) * 3 % V + (i % 3));
        if (t < T) tok[b * T + t] = v;
        if (t > 0) tgt[b * T + t - 1] = v;
      }
  };
  std::vector<int32_t> vt(B * T), vg(B * T), tt(B * T), tg(B * T);
  window(1000, vt, vg);
  Arena arena;
  const double before = loss_and_gradients(m, vt.data(), vg.data(), B, T, {}, arena, nullptr);
  AdamWOptions ao;
  ao.lr = 1e-2;
  ao.warmup_steps = 5;
  ao.total_steps = 40;
  AdamW opt(m.params().layout(), ao);
  ParamBuffer g(m.params().layout());
  for (int64_t step = 0; step < 40; ++step) {
    window(step * 37, tt, tg);
    std::fill(g.data(), g.data() + g.size(), 0.f);
    loss_and_gradients(m, tt.data(), tg.data(), B, T, {}, arena, &g);
    clip_gradients(g, ao.clip_norm);
    opt.update(m.params(), g, learning_rate(ao, step));
  }
  const double after = loss_and_gradients(m, vt.data(), vg.data(), B, T, {}, arena, nullptr);
  EXPECT_LT(after, 0.7 * before) << "before " << before << ", after " << after;
}

TEST_P(Mixers, GreedyDecodingEqualsArgmaxOfParallelLogits) {
  const Model m = perturbed_model(cfg(), 8);
  const int64_t V = m.config().vocab_size;
  const auto prompt = tokens_of(9, V, 7);
  Session s(m);
  s.add_sequence();
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> seq = prompt;
  for (int i = 0; i < 20; ++i) {
    seq.push_back(s.sample(0, greedy));
    s.step(&seq.back());
  }
  const auto logits = model_logits(m, seq, 1, Form::Parallel);
  for (size_t t = prompt.size() - 1; t + 1 < seq.size(); ++t) {
    const float* z = logits.data() + t * V;
    EXPECT_EQ(seq[t + 1], std::max_element(z, z + V) - z) << "position " << t;
  }
}

TEST_P(Mixers, SavedStateContinuesLikeOneRun) {
  const Model m = perturbed_model(cfg(), 9);
  const int64_t V = m.config().vocab_size;
  const auto prompt = tokens_of(12, V, 8);
  SamplingParams greedy;
  greedy.temperature = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("mixer_state_" + GetParam().name + std::to_string(getpid()));
  // One run: prompt, 6 tokens, 6 more. Two runs: save after the first 6, load, 6 more.
  auto run = [&](Session& s, int n, std::vector<int32_t>& out) {
    for (int i = 0; i < n; ++i) {
      out.push_back(s.sample(0, greedy));
      s.step(&out.back());
    }
  };
  std::vector<int32_t> one, two;
  {
    Session s(m);
    s.add_sequence();
    s.prefill(0, prompt.data(), 12);
    run(s, 12, one);
  }
  {
    Session s(m, SessionOptions{.capacity = 2});
    s.add_sequence();
    s.add_sequence();  // sequence 0 is a bystander: the saved one is 1
    s.prefill(0, prompt.data() + 3, 5);
    s.prefill(1, prompt.data(), 12);
    for (int i = 0; i < 6; ++i) {
      const int32_t t[2] = {s.sample(0, greedy), s.sample(1, greedy)};
      two.push_back(t[1]);
      s.step(t);
    }
    s.save(path.string(), 1);
  }
  {
    Session s(m);
    s.add_sequence();
    s.load(path.string(), 0);
    EXPECT_EQ(s.position(0), 18);
    run(s, 6, two);
  }
  std::filesystem::remove(path);
  EXPECT_EQ(one, two);
}

// A fork continues exactly like its source; a snapshot restored, even into another sequence,
// continues exactly like the sequence it was taken from. Whatever the state (constant or a cache).
TEST_P(Mixers, ForkAndSnapshotContinueExactly) {
  const Model m = perturbed_model(cfg(), 6);
  const int64_t V = m.config().vocab_size;
  const auto prompt = tokens_of(21, V, 9), more = tokens_of(7, V, 10);
  SessionOptions so;
  so.capacity = 3;
  Session s(m, so);
  s.add_sequence();
  s.add_sequence();
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  const SavedSequence snap = s.snapshot(0);
  s.fork(0, 1);
  ASSERT_EQ(s.position(1), s.position(0));
  std::vector<std::vector<float>> source, forked;
  for (int32_t t : more) {
    const int32_t pair[2] = {t, t};
    s.step(pair);
    source.emplace_back(s.logits(0), s.logits(0) + V);
    forked.emplace_back(s.logits(1), s.logits(1) + V);
  }
  EXPECT_EQ(source, forked);
  // Restore the snapshot into a third sequence and into the first: both replay the source.
  s.add_sequence();
  s.restore(2, snap);
  s.restore(0, snap);
  EXPECT_EQ(s.position(2), static_cast<int64_t>(prompt.size()));
  for (size_t i = 0; i < more.size(); ++i) {
    const int32_t triple[3] = {more[i], more[(i + 1) % more.size()], more[i]};
    s.step(triple);
    EXPECT_EQ(std::vector<float>(s.logits(0), s.logits(0) + V), source[i]) << "step " << i;
    EXPECT_EQ(std::vector<float>(s.logits(2), s.logits(2) + V), source[i]) << "step " << i;
  }
  SavedSequence wrong = snap;
  wrong.state.push_back(0.f);
  EXPECT_THROW(s.restore(1, wrong), Error);
  EXPECT_THROW(s.fork(0, 3), Error);
}

TEST_P(Mixers, ModelFileRoundTripKeepsTheLogits) {
  const Model m = perturbed_model(cfg(), 10);
  const auto path =
      std::filesystem::temp_directory_path() /
      ("mixer_model_" + GetParam().name + std::to_string(getpid()) + ".safetensors");
  save_model(m, path.string());
  const Model back = load_model(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(back.config().to_json(), m.config().to_json());
  const auto tok = tokens_of(15, m.config().vocab_size, 9);
  EXPECT_EQ(model_logits(back, tok, 1, Form::Parallel),
            model_logits(m, tok, 1, Form::Parallel));
}

INSTANTIATE_TEST_SUITE_P(Family, Mixers,
                         ::testing::ValuesIn(mixer_cases()), mixer_test_name);

TEST(MixerConfig, ParsesWritesAndRejects) {
  Config c = Config::from_json(R"({"mixer": "rwkv"})");
  EXPECT_EQ(c.mixer, &find_mixer("rwkv"));
  EXPECT_EQ(Config::from_json(c.to_json()).mixer, &find_mixer("rwkv"));
  EXPECT_EQ(Config::from_json("{}").to_json().find("mixer"), std::string::npos)
      << "retention configs stay torchscale's";
  try {
    Config::from_json(R"({"mixer": "mamba"})");
    ADD_FAILURE() << "unknown mixer accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aft-simple"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Config::from_json(R"({"mixer": 3})"), Error);
  EXPECT_THROW(Config::from_json(R"({"mixer": "performer", "performer_features": 0})"), Error);
  // Parameter counts follow the layout.
  for (const MixerSpec* k : mixer_registry()) {
    Config mc = mixer_config(k);
    EXPECT_EQ(mc.parameter_count(), static_cast<int64_t>(make_param_layout(mc).total_floats()))
        << k->name;
  }
}

TEST(MixerRegistry, EveryMixerIsFoundByNameAndDescribesItsLayout) {
  std::string names;
  for (const MixerSpec* m : mixer_registry()) {
    EXPECT_EQ(&find_mixer(m->name), m);
    names += (names.empty() ? "" : ", ") + std::string(m->name);
    EXPECT_TRUE(m->has_form(Form::Parallel) && m->has_form(Form::Recurrent)) << m->name;
    // A constant state or a growing cache, never both.
    const Config c = mixer_config(m);
    EXPECT_NE(c.state_floats_per_sequence() > 0, c.cache_floats_per_token() > 0) << m->name;
    EXPECT_EQ(m->keeps_tokens, c.cache_floats_per_token() > 0) << m->name;
    EXPECT_GT(m->core_flops_per_token(c, 256, Form::Parallel, 64), 0) << m->name;
    // Weight decay: the matrices but the embedding; no norms, no mixer's own tensors.
    const ParamLayout layout = make_param_layout(c);
    for (const ParamEntry& e : layout.entries()) {
      const bool own = std::any_of(m->tensors.begin(), m->tensors.end(), [&](const MixerTensor& t) {
        return e.name.ends_with(std::string(".") + t.name);
      });
      const bool want = e.shape.size() == 2 && e.name != "embed_tokens.weight" && !own;
      EXPECT_EQ(e.weight_decay, want) << e.name;
    }
  }
  EXPECT_EQ(mixer_names(), names);
  EXPECT_EQ(&default_mixer(), &find_mixer("retention"));
}
