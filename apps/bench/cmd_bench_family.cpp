// `retnet bench family`: every mixer of the family at (nearly) the same parameter count as the
// default RetNet, measured in one run with the same build and threads: training tokens/s, decode
// latency by position, inference memory by position, and the validation loss after the same
// training time on the bundled corpus.
//
// Equal size: the mixers without retention's gate projection (attention, linear, performer) get
// the FFN width that gives back those d x vd parameters per layer.
//
// Decode latency at position p is a step's cost with p earlier tokens in the state: the state (or
// cache) is filled with small random values rather than by a prefill, since a step's cost does
// not depend on the values, and prefilling 16k tokens into AFT-full or attention would dominate
// the run. Memory is the weights plus the state or cache one sequence holds at that position.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/core/rng.h"
#include "retnet/model/forward.h"
#include "retnet/model/training.h"
#include "retnet/train/optimizer.h"
#include "retnet/train/trainer.h"

namespace retnet::cli {
namespace {

namespace fs = std::filesystem;

struct FamilyOptions {
  std::string mixers = "retention,attention,linear,performer,aft,aft-simple,rwkv";
  std::string data = "data/tinyshakespeare.txt", json, work_dir;
  double train_minutes = 10;
  int reps = 5, threads = 0;
  bool quick = false;
};

// Chunkwise where it carries a constant-size state; a token cache's chunkwise training is its
// parallel form's kernel, reported under that name.
Form training_form(const MixerSpec* kind) {
  return kind->trains_with(Form::Chunkwise) && !kind->keeps_tokens ? Form::Chunkwise
                                                                   : Form::Parallel;
}

// Tokens/s of full training steps (forward, backward, clipping, AdamW) at B x T.
Summary training_speed(Model& m, int64_t B, int64_t T, int reps) {
  const Config& c = m.config();
  auto tok = bench_tokens(B * T + 1, c.vocab_size, 7);
  std::vector<int32_t> in(tok.begin(), tok.end() - 1), tgt(tok.begin() + 1, tok.end());
  TrainingOptions to;
  to.form = training_form(c.mixer);
  Arena arena;
  ParamBuffer grads(m.params().layout());
  AdamW opt(m.params().layout(), AdamWOptions{});
  std::vector<double> r;
  for (int i = 0; i < reps + 1; ++i) {  // the first step pays for allocation
    auto t0 = Clock::now();
    std::fill(grads.data(), grads.data() + grads.size(), 0.f);
    loss_and_gradients(m, in.data(), tgt.data(), B, T, to, arena, &grads);
    clip_gradients(grads, 1.0);
    opt.update(m.params(), grads, 1e-4);
    if (i > 0) r.push_back(static_cast<double>(B * T) / since(t0));
  }
  return summarize(r);
}

// Median seconds of a decode step at `position` over a window of steps.
double step_latency(const Model& m, int64_t position, int64_t window) {
  State s = synthetic_state(m, 1, position, window + 8);
  ForwardOptions fo;
  fo.form = Form::Recurrent;
  Arena arena;
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  int32_t token = 1;
  std::vector<double> t;
  for (int64_t i = 0; i < window + 4; ++i) {
    auto t0 = Clock::now();
    forward_logits(m, &token, 1, 1, logits.data(), fo, arena, &s);
    if (i >= 4) t.push_back(since(t0));
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return summarize(t).median;
}

// Bytes one sequence's state or cache takes at `position` (allocated, as decoding holds it).
int64_t state_bytes_at(const Model& m, int64_t position) {
  State s(m.config(), 1);
  s.cache.reserve(position);
  return static_cast<int64_t>(s.data.size() * sizeof(float) + s.cache.bytes());
}

// Validation loss of the mixer's model after `minutes` of training on the corpus.
TrainResult train_for(const Config& c, const FamilyOptions& o, const std::string& dir) {
  fs::create_directories(dir);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  {
    std::FILE* f = std::fopen(config_path.c_str(), "w");
    RETNET_CHECK(f != nullptr, "cannot write '{}'", config_path);
    std::fputs(c.to_json(2).c_str(), f);
    std::fclose(f);
  }
  TrainOptions t;
  t.data = o.data;
  t.config_path = config_path;
  t.out_dir = dir;
  t.time_budget_s = o.train_minutes * 60;
  t.form = training_form(c.mixer);
  t.eval_interval = t.checkpoint_interval = int64_t{1} << 40;  // once, at the end
  t.quiet = true;
  t.overwrite = true;  // each benchmark run trains from scratch
  return train(t);
}

std::string fmt_bytes(double b) { return human_bytes(b); }

void run_bench_family(const FamilyOptions& o) {
  apply_threads(o.threads);
  std::vector<const MixerSpec*> kinds;
  for (size_t start = 0; start <= o.mixers.size();) {
    size_t end = o.mixers.find(',', start);
    if (end == std::string::npos) end = o.mixers.size();
    if (end > start) kinds.push_back(&find_mixer(o.mixers.substr(start, end - start)));
    start = end + 1;
  }
  RETNET_CHECK(!kinds.empty(), "--mixers lists no mixer");
  const bool train_runs = o.train_minutes > 0;
  if (train_runs)
    RETNET_CHECK(fs::exists(o.data),
                 "training data '{}' not found (give --data, or "
                 "--train-minutes 0 to skip the validation-loss column)",
                 o.data);
  const std::string work =
      o.work_dir.empty()
          ? (fs::temp_directory_path() / ("retnet-family-" + std::to_string(getpid()))).string()
          : o.work_dir;
  const std::vector<int64_t> positions =
      o.quick ? std::vector<int64_t>{128, 1024} : std::vector<int64_t>{128, 1024, 8192, 16384};
  const std::vector<int64_t> memory_at =
      o.quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 8192, 16384};
  const int reps = o.quick ? 1 : o.reps;
  std::printf("machine: %s, %ld cores; %d threads; medians of %d repetitions\n",
              cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN), num_threads(), reps);
  nlohmann::json out = {{"cpu", cpu_model()},
                        {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
                        {"threads", num_threads()},
                        {"repetitions", reps},
                        {"train_minutes", o.train_minutes},
                        {"mixers", nlohmann::json::object()}};
  for (const MixerSpec* kind : kinds) {
    const Config c = family_config(kind);
    Model m = Model::init(c, 1);
    nlohmann::json r = {{"config", nlohmann::json::parse(c.to_json())},
                        {"parameters", m.parameter_count()},
                        {"training_form", form_name(training_form(kind))}};
    std::printf("\n== %s: %lld parameters (ffn %lld), trains with the %s form\n", kind->name,
                (long long)m.parameter_count(), (long long)c.ffn_dim,
                form_name(training_form(kind)));
    std::fflush(stdout);
    // 1. Training speed at T = 256 (batch 8) and T = 2048 (batch 1): the same tokens per step.
    for (auto [B, T] : {std::pair<int64_t, int64_t>{8, 256}, {1, 2048}}) {
      Model tm = Model::init(c, 1);
      const Summary s = training_speed(tm, B, T, reps);
      std::printf("  training  T %5lld: %8.0f tokens/s [%.0f, %.0f]\n", (long long)T, s.median,
                  s.min, s.max);
      r["training_tokens_per_s"][std::to_string(T)] = to_json(s);
    }
    // 2. Decode latency by position (batch 1, float32 packed weights as generation uses).
    m.prepare_decode(DecodePrecision::F32);
    double first = 0;
    for (int64_t p : positions) {
      std::vector<double> v;
      for (int i = 0; i < reps; ++i) v.push_back(1e3 * step_latency(m, p, o.quick ? 16 : 64));
      const Summary s = summarize(v);
      if (p == positions.front()) first = s.median;
      std::printf("  decode    pos %5lld: %8.3f ms/token [%.3f, %.3f]  %.2fx pos %lld\n",
                  (long long)p, s.median, s.min, s.max, s.median / first,
                  (long long)positions.front());
      r["decode_latency_ms_by_position"][std::to_string(p)] = to_json(s);
    }
    // 3. Inference memory: weights plus one sequence's state or cache.
    const int64_t weights = m.parameter_count() * 4;
    for (int64_t p : memory_at) {
      const int64_t state = state_bytes_at(m, p);
      std::printf("  memory    pos %5lld: state %10s, weights + state %10s\n", (long long)p,
                  fmt_bytes(double(state)).c_str(), fmt_bytes(double(weights + state)).c_str());
      r["inference_memory_bytes"][std::to_string(p)] = {{"state", state},
                                                        {"weights_plus_state", weights + state}};
    }
    // 4. Validation loss after the same training time.
    if (train_runs) {
      const TrainResult t = train_for(c, o, (fs::path(work) / std::string(kind->scope)).string());
      std::printf(
          "  training  %.1f min: %lld steps, %.0f tokens/s, val loss %.4f (%.4f bits/byte)\n",
          o.train_minutes, (long long)t.steps, t.tokens_per_s, t.final_val_loss,
          t.val_bits_per_byte);
      r["validation"] = {{"minutes", o.train_minutes},
                         {"steps", t.steps},
                         {"tokens_per_s", t.tokens_per_s},
                         {"val_loss", t.final_val_loss},
                         {"val_bits_per_byte", t.val_bits_per_byte}};
    }
    std::fflush(stdout);
    out["mixers"][kind->name] = r;
  }
  if (o.work_dir.empty() && train_runs) fs::remove_all(work);
  if (!o.json.empty()) write_json(o.json, out);
}

}  // namespace

void register_bench_family(CLI::App* bench) {
  auto [o, cmd] = add_bench_subcommand<FamilyOptions>(
      bench, "family",
      "Every mixer at the default model's size: training tokens/s, decode latency and memory by "
      "position, validation loss after the same training time");
  cmd->add_option("--mixers", o->mixers, "Comma-separated mixers to run")->capture_default_str();
  add_checked(cmd, "--train-minutes", o->train_minutes,
              "Training time per mixer for the validation loss (0: skip)", number_at_least(0));
  cmd->add_option("--data", o->data, "Training text (the bundled corpus)")->capture_default_str();
  cmd->add_flag("--quick", o->quick,
                "Positions 128 and 1k only, one repetition (a smoke test; pair with a small "
                "--train-minutes)");
  add_bench_run_options(cmd, o->reps, o->threads, o->json);
  cmd->add_option("--work-dir", o->work_dir,
                  "Keep the training runs here (default: a temporary directory, removed)");
  cmd->callback([o = o] { run_bench_family(*o); });
}

}  // namespace retnet::cli
