// `retnet demo`: the main job until training lands. Initialises the default model, runs a text
// through all four retention forms, shows that they agree, and measures their speed and the
// recurrent decoder's speed and memory.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "retnet/core/gemm.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - ref[i]));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return num / std::max(den, 1e-30);
}

std::vector<int32_t> text_tokens(const std::string& path, int64_t T) {
  std::string text;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) text = read_file(path, "--data file");
  if (text.empty()) text = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) tokens[i] = static_cast<unsigned char>(text[i % text.size()]);
  return tokens;
}

}  // namespace

void register_demo(CLI::App& app) {
  struct Opts {
    std::string model, config, data = "data/tinyshakespeare.txt", backend = "cpu";
    int64_t tokens = 2048, decode = 1024, chunk = 64;
    int threads = 0, repeats = 3;
    uint64_t seed = 1;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "demo", "Run a text through all four retention forms: agreement, speed, decode memory");
  cmd->add_option("--model,-m", o->model, "Model file (default: initialise the default model)");
  cmd->add_option("--config", o->config, "Config JSON for the initialised model");
  cmd->add_option("--data", o->data, "Text whose bytes are the input")->capture_default_str();
  add_checked(cmd, "--tokens,-T", o->tokens, "Input length", integer_within(1, 1 << 20));
  add_checked(cmd, "--decode,-n", o->decode, "Tokens to decode greedily after the input (0: skip)",
              integer_at_least(0));
  add_checked(cmd, "--chunk", o->chunk, "Chunk size of the chunkwise form (0: the config's)",
              integer_at_least(0));
  add_checked(cmd, "--repeats", o->repeats, "Timed runs per form (median)", integer_at_least(1));
  add_threads_option(cmd, o->threads);
  add_backend_option(cmd, o->backend);
  add_checked(cmd, "--seed,-s", o->seed, "Seed of the initialised model", integer_at_least(0));
  cmd->callback([o] {
    apply_threads(o->threads);
    auto t_load = std::chrono::steady_clock::now();
    Model model = o->model.empty()
                      ? Model::init(o->config.empty() ? Config{} : Config::from_file(o->config),
                                    o->seed)
                      : load_model(o->model, optional_config(o->config));
    model.use_backend(o->backend);
    const Config& c = model.config();
    std::printf("model: %s, %lld parameters (%s), %s in %.2f s\n", c.to_json().c_str(),
                (long long)model.parameter_count(), human_bytes(4.0 * model.parameter_count()).c_str(),
                o->model.empty() ? "initialised" : "loaded", seconds_since(t_load));
    const BlasInfo& blas = blas_info();
    std::printf("BLAS: %s (core %s, OPENBLAS_CORETYPE=%s), %d threads, %s backend\n",
                blas.library.c_str(), blas.corename.c_str(), blas.coretype.c_str(), num_threads(),
                o->backend.c_str());

    const int64_t T = o->tokens, V = c.vocab_size;
    std::vector<int32_t> tokens = text_tokens(o->data, T);
    for (auto& t : tokens) t %= static_cast<int32_t>(V);
    ModelRunner runner(model);
    std::vector<float> reference;
    std::printf("\n%-10s %12s %14s %22s\n", "form", "ms", "tokens/s", "max|diff|/max|parallel|");
    for (Form form : {Form::Parallel, Form::Chunkwise,
                               Form::Scan, Form::Recurrent}) {
      std::vector<float> logits(static_cast<size_t>(T * V));
      std::vector<double> times;
      for (int r = 0; r <= o->repeats; ++r) {  // the first run warms up
        auto t0 = std::chrono::steady_clock::now();
        runner.logits(tokens, 1, logits.data(), form, o->chunk);
        if (r > 0) times.push_back(seconds_since(t0));
      }
      std::sort(times.begin(), times.end());
      double med = times[times.size() / 2];
      if (form == Form::Parallel) reference = logits;
      std::printf("%-10s %12.2f %14.0f %22.3g\n", form_name(form), med * 1e3, T / med,
                  max_rel_diff(logits, reference));
    }

    if (o->decode <= 0) return;  // `retnet generate` does the decoding in the main job
    // Decode: prefill with the chunkwise form, then one token at a time from the recurrent state.
    SessionOptions so;
    so.prefill_chunk = o->chunk;
    Session session(model, so);
    session.add_sequence();
    session.prefill(0, tokens.data(), T);
    auto argmax = [&] {
      const float* z = session.logits(0);
      return static_cast<int32_t>(std::max_element(z, z + V) - z);
    };
    int32_t token = argmax();
    std::string text;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o->decode; ++i) {
      session.step(&token);
      text.push_back(static_cast<char>(token));
      token = argmax();
    }
    double dt = seconds_since(t0);
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("\ndecode: %lld tokens after a %lld-token chunkwise prefill: %.0f tokens/s "
                "(%.3f ms/token), state %s per sequence (constant in length), peak RSS %s\n",
                (long long)o->decode, (long long)T, o->decode / dt, 1e3 * dt / o->decode,
                human_bytes(double(model.state_bytes_per_sequence())).c_str(),
                human_bytes(1024.0 * ru.ru_maxrss).c_str());
    for (char& ch : text)
      if ((static_cast<unsigned char>(ch) < 32 && ch != '\n') || static_cast<unsigned char>(ch) > 126)
        ch = '?';
    std::printf("\ngreedy continuation of the input by the %s model (first 400 bytes):\n%.400s\n",
                o->model.empty() ? "untrained" : "loaded", text.c_str());
  });
}

}  // namespace retnet::cli
