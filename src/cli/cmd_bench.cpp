// `retnet bench decode`: the generation benchmark. Decode latency per token by position (flat for
// RetNet), decode throughput by batch size, and prefill speed of the chunkwise form against the
// parallel form; medians of repetitions with their spread, the baseline measured in the same run.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"
#include "retnet/infer/session.h"
#include "retnet/model/model_io.h"

namespace retnet::cli {
namespace {

// Median per-token decode latency (seconds) over `window` steps starting at `position`.
double window_latency(const Model& m, int64_t position, int64_t window) {
  Session s(m);
  s.add_sequence();
  auto prompt = bench_tokens(std::max<int64_t>(position, 1), m.config().vocab_size);
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  std::vector<double> step;
  int32_t token = prompt.back();
  for (int64_t i = 0; i < window + 4; ++i) {  // 4 warm-up steps
    auto t0 = Clock::now();
    s.step(&token);
    token =
        static_cast<int32_t>(std::max_element(s.logits(0), s.logits(0) + s.vocab()) - s.logits(0));
    if (i >= 4) step.push_back(since(t0));
  }
  return summarize(step).median;
}

// Aggregate decode tokens/s of B sequences stepping together.
double batch_throughput(const Model& m, int64_t B, int64_t steps) {
  SessionOptions so;
  so.capacity = B;
  Session s(m, so);
  for (int64_t b = 0; b < B; ++b) {
    s.add_sequence();
    auto p = bench_tokens(16, m.config().vocab_size, b + 1);
    s.prefill(b, p.data(), 16);
  }
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  auto step_all = [&] {
    for (int64_t b = 0; b < B; ++b)
      tokens[b] = static_cast<int32_t>(std::max_element(s.logits(b), s.logits(b) + s.vocab()) -
                                       s.logits(b));
    s.step(tokens.data());
  };
  for (int i = 0; i < 4; ++i) step_all();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step_all();
  return static_cast<double>(B * steps) / since(t0);
}

// Prefill tokens/s of one sequence of T tokens in a form (last-token logits only).
double prefill_speed(const Model& m, RetentionForm form, int64_t T) {
  auto tokens = bench_tokens(T, m.config().vocab_size);
  ForwardOptions fo;
  fo.form = form;
  fo.last_logits_only = true;
  Arena arena;
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  auto t0 = Clock::now();
  forward_logits(m, tokens.data(), 1, T, logits.data(), fo, arena);
  return static_cast<double>(T) / since(t0);
}

void run_bench_decode(const std::string& model_path, int reps, bool quick, int threads,
                      const std::string& json_out) {
  apply_threads(threads);
  Model m = model_path.empty() ? Model::init(Config{}, 1) : load_model(model_path);
  m.prepare_decode(DecodePrecision::F32);
  const Config& c = m.config();
  std::printf("model: %s, %lld parameters, state %s per sequence\n", c.to_json().c_str(),
              (long long)m.parameter_count(),
              human_bytes(double(m.state_bytes_per_sequence())).c_str());
  std::printf(
      "machine: %s, %ld cores; %d threads; BLAS core %s; medians of %d repetitions "
      "[min, max]\n\n",
      cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN), num_threads(),
      blas_info().corename.c_str(), reps);
  nlohmann::json out = {{"cpu", cpu_model()},
                        {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
                        {"threads", num_threads()},
                        {"config", nlohmann::json::parse(c.to_json())},
                        {"parameters", m.parameter_count()},
                        {"state_bytes", m.state_bytes_per_sequence()},
                        {"repetitions", reps}};

  // 1. Latency by position: the state does not grow, so neither does the step. Each repetition
  // visits every position in turn (and every batch size below), so a machine that speeds up or
  // slows down during the run shifts all of them alike instead of skewing the ratios.
  const std::vector<int64_t> positions =
      quick ? std::vector<int64_t>{16, 1024} : std::vector<int64_t>{16, 1024, 4096, 16384};
  std::printf("decode latency per token by position (batch 1, 64-step windows)\n");
  std::printf("%10s %12s %22s %10s\n", "position", "ms/token", "[min, max]", "vs 16");
  std::vector<std::vector<double>> latency(positions.size());
  for (int i = 0; i < reps; ++i)
    for (size_t j = 0; j < positions.size(); ++j)
      latency[j].push_back(1e3 * window_latency(m, positions[j], 64));
  const double base = summarize(latency.front()).median;
  for (size_t j = 0; j < positions.size(); ++j) {
    const Summary s = summarize(latency[j]);
    std::printf("%10lld %12.4f %10.4f, %9.4f %9.3fx\n", (long long)positions[j], s.median, s.min,
                s.max, s.median / base);
    out["latency_ms_by_position"][std::to_string(positions[j])] = to_json(s);
  }

  // 2. Throughput by batch size: one GEMM per projection for the whole batch; with float32
  // weights (exact) and with their f16 copy (half the bytes streamed per step).
  const std::vector<int64_t> batches =
      quick ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{1, 4, 16, 64};
  std::printf("\ndecode throughput by batch size (all sequences step together), tokens/s\n");
  std::printf("%8s %10s %22s %10s %10s %22s %10s\n", "batch", "f32", "[min, max]", "vs batch 1",
              "f16", "[min, max]", "f16/f32");
  std::vector<std::vector<double>> r32(batches.size()), r16(batches.size());
  for (int i = 0; i < reps; ++i)
    for (size_t j = 0; j < batches.size(); ++j) {
      m.prepare_decode(DecodePrecision::F32);
      r32[j].push_back(batch_throughput(m, batches[j], quick ? 32 : 64));
      m.prepare_decode(DecodePrecision::F16);
      r16[j].push_back(batch_throughput(m, batches[j], quick ? 32 : 64));
    }
  m.prepare_decode(DecodePrecision::F32);
  const double b1 = summarize(r32.front()).median;
  for (size_t j = 0; j < batches.size(); ++j) {
    const Summary s = summarize(r32[j]), h = summarize(r16[j]);
    std::printf("%8lld %10.0f %10.0f, %10.0f %9.2fx %10.0f %10.0f, %10.0f %9.2fx\n",
                (long long)batches[j], s.median, s.min, s.max, s.median / b1, h.median, h.min,
                h.max, h.median / s.median);
    out["decode_tokens_per_s_by_batch"][std::to_string(batches[j])] = to_json(s);
    out["decode_tokens_per_s_by_batch_f16"][std::to_string(batches[j])] = to_json(h);
  }

  // 3. Prefill: the chunkwise form against the parallel form.
  const std::vector<int64_t> lengths =
      quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 2048, 8192};
  std::printf("\nprefill tokens/s (one sequence, last-token logits)\n");
  std::printf("%10s %14s %14s %12s\n", "T", "parallel", "chunkwise", "chunkwise/parallel");
  for (int64_t T : lengths) {
    std::vector<double> par, chk;
    prefill_speed(m, RetentionForm::Chunkwise, T);  // warm-up
    for (int i = 0; i < reps; ++i) {
      par.push_back(prefill_speed(m, RetentionForm::Parallel, T));
      chk.push_back(prefill_speed(m, RetentionForm::Chunkwise, T));
    }
    Summary sp = summarize(par), sc = summarize(chk);
    std::printf("%10lld %14.0f %14.0f %12.2fx\n", (long long)T, sp.median, sc.median,
                sc.median / sp.median);
    out["prefill_tokens_per_s"][std::to_string(T)] = {{"parallel", to_json(sp)},
                                                      {"chunkwise", to_json(sc)}};
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  out["peak_rss_bytes"] = 1024 * static_cast<int64_t>(ru.ru_maxrss);
  std::printf("\npeak RSS %s\n", human_bytes(1024.0 * ru.ru_maxrss).c_str());
  if (!json_out.empty()) write_json(json_out, out);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench",
                                   "Benchmarks that print ratios against a baseline "
                                   "measured in the same run");
  bench->require_subcommand(1);
  struct Opts {
    std::string model, json;
    int reps = 5, threads = 0;
    bool quick = false;
  };
  auto o = std::make_shared<Opts>();
  auto* dec = bench->add_subcommand(
      "decode",
      "Decode latency by position, decode throughput by batch, prefill chunkwise vs "
      "parallel");
  dec->add_option("--model,-m", o->model, "Model file (default: the default config, initialised)");
  dec->add_option("--reps", o->reps, "Repetitions per figure (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dec->add_flag("--quick", o->quick, "Fewer positions, batches and lengths (a smoke test)");
  dec->add_option("--threads,-t", o->threads, "Threads (default: all cores)");
  dec->add_option("--json", o->json, "Also write the results to this JSON file");
  dec->callback([o] { run_bench_decode(o->model, o->reps, o->quick, o->threads, o->json); });
  register_bench_family(bench);
  register_bench_paper(bench);
}

}  // namespace retnet::cli
