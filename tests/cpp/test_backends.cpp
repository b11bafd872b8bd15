// The backends (src/include/retnet/backend/backend.h): every mixer alone and hybrid models, in
// every form they have, from an empty state and continuing one (prefill, then decode steps), give
// the same logits on the reference backend as on the CPU backend, with the mixers' options too;
// so do half-precision and quantised weights. The reference computes each mixer itself (a block
// whose forward refuses to run gives the CPU's outputs, state and cache), and a state either
// backend leaves continues on the other. Unknown names are refused naming the choices; the CLI's
// --backend decodes the same greedy text on both.
#include <unistd.h>

#include <filesystem>

#include "cli_runner.h"
#include "mixer_cases.h"
#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/model/forward.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/model/model_io.h"
#include "retnet/model/state.h"
#include "retnet/ops/rotation.h"
#include "test_helpers.h"
#include "test_support.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::MixerCase;

namespace {

Model on_backend(const Model& m, const std::string& name) {
  Model copy = m;
  copy.use_backend(name);
  return copy;
}

// Logits [B, T, vocab] of a prompt of `prefill` tokens per sequence in `form` into a fresh state
// on `prefill_model`, then the rest one decode step at a time on `decode_model` (the same weights,
// maybe on another backend: the state changes hands), the way sessions run.
std::vector<float> handed_over_logits(const Model& prefill_model, const Model& decode_model,
                                      const std::vector<int32_t>& tok, int64_t B,
                                      int64_t prefill, Form form) {
  const int64_t T = static_cast<int64_t>(tok.size()) / B, V = prefill_model.config().vocab_size;
  std::vector<float> out(tok.size() * V, NAN);
  State state(prefill_model.config(), B);
  Arena arena;
  for (int64_t from = 0; from < T; from = from == 0 ? prefill : from + 1) {
    const int64_t count = from == 0 ? prefill : 1;
    std::vector<int32_t> part(static_cast<size_t>(B * count));
    std::vector<float> logits(part.size() * V, NAN);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < count; ++t) part[b * count + t] = tok[b * T + from + t];
    ForwardOptions o;
    o.form = from == 0 ? form : Form::Recurrent;
    forward_logits(from == 0 ? prefill_model : decode_model, part.data(), B, count,
                   logits.data(), o, arena, &state);
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(logits.begin() + b * count * V, count * V, out.begin() + (b * T + from) * V);
  }
  return out;
}

// handed_over_logits on one model.
std::vector<float> continued_logits(const Model& m, const std::vector<int32_t>& tok, int64_t B,
                                    int64_t prefill, Form form) {
  return handed_over_logits(m, m, tok, B, prefill, form);
}

// The reference's logits against the CPU's in every form of the config, from empty sequences and
// continuing a prompt's state one decode step at a time.
void expect_reference_matches_cpu(const Config& config) {
  const Model cpu = test::perturbed_model(config, 5);
  const Model reference = on_backend(cpu, "reference");
  const Config& c = cpu.config();
  const int64_t B = 2, T = 11;  // chunkwise: chunks of 8 and 3
  const auto tok = test::tokens_of(B * T, c.vocab_size, 4);
  for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise, Form::Scan}) {
    if (!c.has_form(form)) continue;
    EXPECT_TRUE(close(test::model_logits(reference, tok, B, form),
                      test::model_logits(cpu, tok, B, form), 1e-5))
        << form_name(form);
    if (form == Form::Recurrent || (form == Form::Parallel && !c.keeps_tokens())) continue;
    EXPECT_TRUE(close(continued_logits(reference, tok, B, 6, form),
                      continued_logits(cpu, tok, B, 6, form), 1e-5))
        << form_name(form) << " prefill, then decode steps";
  }
}

// A mixer block whose every call fails: the reference backend is handed it in place of the
// layer's own, which it must never need.
class BlockThatMustNotRun final : public retnet::detail::LayerMixer {
 public:
  size_t saved_floats(const Config&, int64_t, int64_t) const override { return 0; }
  size_t workspace_floats(const Config&, Form, int64_t, int64_t, int64_t,
                          int64_t) const override {
    return 0;
  }
  size_t backward_workspace_floats(const Config&, Form, int64_t, int64_t,
                                   int64_t) const override {
    return 0;
  }
  const float* forward(const retnet::detail::MixerPass&, Arena&) const override { refuse(); }
  const float* output(const retnet::detail::MixerGrad&, float*) const override { refuse(); }
  void backward(const retnet::detail::MixerGrad&, Arena&) const override { refuse(); }

 private:
  [[noreturn]] static void refuse() {
    throw Error("the reference backend ran the mixer block's own code");
  }
};

// What one layer's mixer leaves over a prompt of 5 tokens in `form` then one decode step, run
// straight through a backend: both passes' outputs, and the state and token cache after them.
// The step runs the sequences in the other order (each from its row), as a server's slots do.
struct MixerRun {
  std::vector<float> out, state, cache;
};

MixerRun run_mixer_directly(const retnet::detail::Backend& backend, const retnet::detail::LayerMixer& block,
                            const Model& m, int64_t layer, Form form) {
  const Config& lc = m.layer_config(layer);
  const int64_t B = 2, P = lc.projection_width(), vd = lc.value_embed_dim, chunk = 2;
  const int64_t floats = lc.mixer->state_floats_per_layer ? lc.mixer->state_floats_per_layer(lc)
                                                          : 0;
  const int64_t row = lc.mixer->cache_floats_per_token_per_layer
                          ? lc.mixer->cache_floats_per_token_per_layer(lc)
                          : 0;
  MixerRun run;
  run.state.assign(static_cast<size_t>(B * floats), 0.f);
  TokenCache cache;
  if (row) {
    cache.layers = 1, cache.sequences = B, cache.capacity = 8, cache.floats_per_token = row;
    cache.row_floats = {row};
    cache.storage = {std::vector<float>(static_cast<size_t>(B * cache.capacity * row), 0.f)};
  }
  std::vector<int64_t> positions(B, 0);
  for (auto [T, f] : {std::pair<int64_t, Form>{5, form}, {1, Form::Recurrent}}) {
    std::vector<float> proj = test::random_vector(B * T * P, 40 + layer, 1.0, T);
    std::vector<float> out(static_cast<size_t>(B * T * vd), NAN);
    std::vector<float> table(2 * m.layer_thetas(layer).size() * static_cast<size_t>(B * T));
    retnet::detail::MixerPass p{.model = &m, .layer = layer, .B = B, .T = T, .form = f, .chunk = chunk,
                        .proj = proj.data(), .out = out.data()};
    p.state = floats ? run.state.data() : nullptr;
    p.state_stride = floats;
    p.cache = row ? &cache : nullptr;
    p.positions = positions.data();
    const int64_t swapped[B] = {1, 0};
    if (T == 1) p.rows = swapped;
    if (lc.mixer->rotates) {
      p.rotation = table.data();
      p.rotation_stride = rotation_table(m.layer_thetas(layer), B, T, positions.data(),
                                         table.data());
    }
    // A pass of several tokens with a cache runs the prefill whatever its form: room for both.
    const retnet::detail::LayerMixer& own = retnet::detail::layer_mixer(lc);
    Arena arena(std::max(own.workspace_floats(lc, f, B, T, chunk, 0),
                         own.workspace_floats(lc, Form::Parallel, B, T, chunk, 0)));
    const float* mixed = backend.mixer_forward(block, p, arena);
    run.out.insert(run.out.end(), mixed, mixed + B * T * vd);
    for (int64_t& position : positions) position += T;
  }
  if (row) run.cache = cache.storage[0];
  return run;
}

class Backends : public ::testing::TestWithParam<MixerCase> {};

}  // namespace

TEST_P(Backends, ReferenceMatchesCpuInEveryForm) { expect_reference_matches_cpu(GetParam().config); }

TEST_P(Backends, ReferenceComputesEveryMixerItself) {
  const Model m = test::perturbed_model(GetParam().config, 7);
  for (int64_t l = 0; l < m.config().layers; ++l) {
    const Config& lc = m.layer_config(l);
    const bool has_state = lc.mixer->state_floats_per_layer != nullptr;
    for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise, Form::Scan}) {
      // The parallel form of a mixer with a constant state neither reads nor writes it.
      if (!lc.mixer->has_form(form) || (form == Form::Parallel && has_state)) continue;
      const MixerRun cpu = run_mixer_directly(retnet::detail::cpu_backend(), retnet::detail::layer_mixer(lc), m,
                                              l, form);
      MixerRun reference;
      ASSERT_NO_THROW(reference = run_mixer_directly(retnet::detail::reference_backend(),
                                                     BlockThatMustNotRun(), m, l, form))
          << "layer " << l << ", " << form_name(form);
      EXPECT_TRUE(close(reference.out, cpu.out, 1e-5)) << "layer " << l << ", " << form_name(form);
      EXPECT_TRUE(close(reference.state, cpu.state, 1e-5))
          << "layer " << l << ", " << form_name(form);
      EXPECT_TRUE(close(reference.cache, cpu.cache, 1e-5))
          << "layer " << l << ", " << form_name(form);
    }
  }
}

TEST_P(Backends, StateContinuesOnTheOtherBackend) {
  const Model cpu = test::perturbed_model(GetParam().config, 5);
  const Model reference = on_backend(cpu, "reference");
  const Config& c = cpu.config();
  const int64_t B = 2, T = 9;
  const auto tok = test::tokens_of(B * T, c.vocab_size, 3);
  const Form form = c.has_form(Form::Chunkwise) ? Form::Chunkwise : Form::Parallel;
  const auto want = continued_logits(cpu, tok, B, 6, form);
  EXPECT_TRUE(close(handed_over_logits(reference, cpu, tok, B, 6, form), want, 1e-5))
      << "prompt on the reference, decode steps on the CPU";
  EXPECT_TRUE(close(handed_over_logits(cpu, reference, tok, B, 6, form), want, 1e-5))
      << "prompt on the CPU, decode steps on the reference";
}

INSTANTIATE_TEST_SUITE_P(Family, Backends, ::testing::ValuesIn(test::mixer_cases()),
                         [](const ::testing::TestParamInfo<MixerCase>& info) {
                           return info.param.name;
                         });

// Options each mixer's definition must honour, in every form, beyond the family's cases:
// retention's fla conventions (half-split rotation, no score normalisation, a head-norm weight,
// no gate), shared kv heads, wide keys and a feature map; attention's sliding window shorter
// than the prompt (so the decode steps read a window of the cache), a shared kv head and biases.
TEST(Backends, ReferenceHonoursMixerOptions) {
  const auto retention = [](void (*apply)(Config&)) {
    Config c = test::model_config(16, 24, 4, 20, 2, 30);
    c.recurrent_chunk_size = 8;
    apply(c);
    return c;
  };
  const std::pair<const char*, Config> cases[] = {
      {"retention_fla", retention([](Config& c) {
         c.rotary = RotaryStyle::HalfSplit;
         c.normalize_scores = false;
         c.head_norm_weight = true;
         c.output_gate = false;
       })},
      {"retention_gqa_wide_keys_gelu", retention([](Config& c) {
         c.kv_heads = 2;
         c.key_embed_dim = 2 * c.embed_dim;
         c.feature_map = QkFeatureMap::Gelu;
       })},
      {"retention_mqa_sigmoid", retention([](Config& c) {
         c.kv_heads = 1;
         c.feature_map = QkFeatureMap::Sigmoid;
       })},
      {"attention_window_mqa_bias", [] {
         Config c = test::mixer_config(&find_mixer("attention"));
         test::set_mixer_options(
             c, R"({"attention": {"window_size": 3, "kv_heads": 1, "qkv_bias": true}})");
         return c;
       }()},
  };
  for (const auto& [name, config] : cases) {
    SCOPED_TRACE(name);
    expect_reference_matches_cpu(config);
  }
}

TEST(Backends, ReferenceReadsEveryWeightType) {
  // Rows of 32 and 64 values: whole blocks of the quantised types.
  Config config = test::model_config(32, 64, 2, 64, 2, 40);
  config.recurrent_chunk_size = 8;
  const auto tok = test::tokens_of(2 * 9, config.vocab_size, 2);
  // The half types' products accumulate in float32 as the reference does. The quantised kernels
  // also round the activations to 8-bit blocks, which moves these logits by a few percent; a
  // weight read wrongly moves them by their whole size.
  for (auto [precision, tol] : {std::pair{DecodePrecision::F16, 1e-5},
                                {DecodePrecision::BF16, 1e-5},
                                {DecodePrecision::Q8_0, 0.1},
                                {DecodePrecision::Q4_0, 0.2}}) {
    Model cpu = test::perturbed_model(config, 6);
    cpu.prepare_inference(precision);
    const Model reference = on_backend(cpu, "reference");
    EXPECT_TRUE(close(test::model_logits(reference, tok, 2, Form::Chunkwise),
                      test::model_logits(cpu, tok, 2, Form::Chunkwise), tol))
        << decode_precision_name(precision);
  }
}

TEST(Backends, NamesAreListedAndOthersRefused) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"cpu", "reference"}));
  Model m = Model::init(test::tiny_config(), 1);
  EXPECT_STREQ(m.backend().name(), "cpu");
  EXPECT_TRUE(test::throws_error_naming([&] { m.use_backend("cuda"); },
                                        {"backend", "cuda", "cpu, reference"}));
  m.use_backend("reference");
  EXPECT_STREQ(m.backend().name(), "reference");
}

TEST(BackendsCli, GenerateOnTheReferenceGivesTheCpuText) {
  namespace fs = std::filesystem;
  const fs::path dir = test::fresh_temp_dir("backends_cli");
  const std::string model = (dir / "m.safetensors").string();
  save_model(test::perturbed_model(test::small_decode_config(), 8), model);
  const std::string args = "generate -m " + model + " -p 'ROMEO:' -n 24 --temp 0 ";
  const auto cpu = test::run_retnet(args);
  const auto reference = test::run_retnet(args + "--backend reference");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  EXPECT_EQ(reference.out, cpu.out);
  EXPECT_TRUE(test::fails_cleanly(test::run_retnet(args + "--backend cuda"), "--backend"));
  const auto version = test::run_retnet("--version");
  EXPECT_NE(version.out.find("cpu, reference"), std::string::npos) << version.out;
  fs::remove_all(dir);
}

TEST(BackendsCli, EveryCommandThatRunsAModelTakesTheBackend) {
  namespace fs = std::filesystem;
  const fs::path dir = test::fresh_temp_dir("backends_cli_commands");
  const std::string model = (dir / "m.safetensors").string();
  save_model(test::perturbed_model(test::small_decode_config(), 9), model);
  const std::string data = std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt";
  for (const std::string& args :
       {"demo -m " + model + " --data " + data + " -T 16 -n 4 --repeats 1",
        "bench speculative -m " + model + " --dtype f32 --k 1,2 --reps 1 --rounds 1 --position 4"}) {
    const auto reference = test::run_retnet(args + " --backend reference");
    ASSERT_EQ(reference.exit_code, 0) << args << "\n" << reference.err;
    EXPECT_TRUE(test::fails_cleanly(test::run_retnet(args + " --backend cuda"), "--backend"))
        << args;
  }
  // demo runs every form on the backend: the reference computes every form as the one
  // definition, so they agree exactly, and the header names the backend.
  const auto demo = test::run_retnet("demo -m " + model + " --data " + data +
                                     " -T 16 -n 4 --repeats 1 --backend reference");
  EXPECT_NE(demo.out.find("reference backend"), std::string::npos) << demo.out;
  fs::remove_all(dir);
}
