// The backends (src/include/retnet/backend/backend.h): every mixer alone and hybrid models, in
// every form they have, from an empty state and continuing one (prefill, then decode steps), give
// the same logits on the reference backend as on the CPU backend; so do half-precision and
// quantised weights. Unknown names are refused naming the choices; the CLI's --backend decodes
// the same greedy text on both.
#include <unistd.h>

#include <filesystem>

#include "cli_runner.h"
#include "mixer_cases.h"
#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/model/forward.h"
#include "retnet/model/model_io.h"
#include "retnet/model/state.h"
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

// Logits [B, T, vocab] of a prompt of `prefill` tokens per sequence in `form` into a fresh state,
// then the rest one decode step at a time, the way sessions run.
std::vector<float> continued_logits(const Model& m, const std::vector<int32_t>& tok, int64_t B,
                                    int64_t prefill, Form form) {
  const int64_t T = static_cast<int64_t>(tok.size()) / B, V = m.config().vocab_size;
  std::vector<float> out(tok.size() * V, NAN);
  State state(m.config(), B);
  Arena arena;
  auto run = [&](int64_t from, int64_t count, Form f) {
    std::vector<int32_t> part(static_cast<size_t>(B * count));
    std::vector<float> logits(part.size() * V, NAN);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < count; ++t) part[b * count + t] = tok[b * T + from + t];
    ForwardOptions o;
    o.form = f;
    forward_logits(m, part.data(), B, count, logits.data(), o, arena, &state);
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(logits.begin() + b * count * V, count * V, out.begin() + (b * T + from) * V);
  };
  run(0, prefill, form);
  for (int64_t t = prefill; t < T; ++t) run(t, 1, Form::Recurrent);
  return out;
}

class Backends : public ::testing::TestWithParam<MixerCase> {};

}  // namespace

TEST_P(Backends, ReferenceMatchesCpuInEveryForm) {
  const Model cpu = test::perturbed_model(GetParam().config, 5);
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

INSTANTIATE_TEST_SUITE_P(Family, Backends, ::testing::ValuesIn(test::mixer_cases()),
                         [](const ::testing::TestParamInfo<MixerCase>& info) {
                           return info.param.name;
                         });

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
  // demo runs every form on the backend: the reference's forms are one recurrence, so they agree
  // exactly, and the header names the backend.
  const auto demo = test::run_retnet("demo -m " + model + " --data " + data +
                                     " -T 16 -n 4 --repeats 1 --backend reference");
  EXPECT_NE(demo.out.find("reference backend"), std::string::npos) << demo.out;
  fs::remove_all(dir);
}
