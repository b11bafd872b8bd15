// `retnet bench decode`: the generation benchmark. Decode latency per token by position (flat for
// RetNet), decode throughput by batch size with its ceiling on this machine, and prefill speed of
// the chunkwise form against the parallel form; medians of repetitions with their spread, the
// baselines measured in the same run.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
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

namespace fs = std::filesystem;

// Batch-1 states at each position, saved once (prefilled then), so that every repetition's window
// starts at exactly its position without a prefill just before it: a window timed right after a
// long prefill runs slower than the same steps in a session already decoding
// (docs/design-notes.md#bench-decode-order).
class PositionStates {
 public:
  PositionStates(const Model& m, const std::vector<int64_t>& positions) {
    const std::string stem =
        (fs::temp_directory_path() / ("retnet-bench-" + std::to_string(getpid()) + "-position-"))
            .string();
    for (int64_t p : positions) {
      Session s(m);
      s.add_sequence();
      auto prompt = bench_tokens(std::max<int64_t>(p, 1), m.config().vocab_size);
      s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
      paths_.push_back(stem + std::to_string(p) + ".state");
      s.save(paths_.back());
    }
  }
  ~PositionStates() {
    for (const auto& p : paths_) {
      std::error_code ec;
      fs::remove(p, ec);
    }
  }
  PositionStates(const PositionStates&) = delete;
  PositionStates& operator=(const PositionStates&) = delete;

  // Median per-token latency (seconds) of `window` greedy steps of `s` from position j's state.
  double window_latency(Session& s, size_t j, int64_t window) const {
    s.load(paths_.at(j));
    std::vector<double> step;
    int32_t token = 0;
    for (int64_t i = 0; i < window + 4; ++i) {  // 4 warm-up steps
      token = static_cast<int32_t>(std::max_element(s.logits(0), s.logits(0) + s.vocab()) -
                                   s.logits(0));
      auto t0 = Clock::now();
      s.step(&token);
      if (i >= 4) step.push_back(since(t0));
    }
    return summarize(step).median;
  }

 private:
  std::vector<std::string> paths_;
};

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

// Multiply-adds per token of a decode step's weight products (input projections, output
// projection, FFN, logits): nearly all of a batched step's arithmetic.
int64_t product_macs_per_token(const Config& c) {
  const int64_t d = c.embed_dim;
  int64_t macs = c.vocab_size * d;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);  // a hybrid model's layers differ in width
    macs += lc.projection_width() * d + d * lc.value_embed_dim + 3 * c.ffn_dim * d;
  }
  return macs;
}

// GFLOP/s of the packed kernel on 64 rows of the model's input projection with its weights in
// cache (median of `calls`): the most any batch size can get out of the products, since a step
// must also stream its weights and update its state (64 rows, the table's largest batch, run a
// little faster than 16: more of them go through the full six-row tiles).
double packed_kernel_gflops(const Config& c, int calls) {
  const int64_t M = 64, N = c.max_projection_width(), K = c.embed_dim;
  std::vector<float> weights(static_cast<size_t>(N * K), 0.01f);
  std::vector<float> packed(packed_weight_elements(N, K)), A(static_cast<size_t>(M * K), 0.5f);
  std::vector<float> C(static_cast<size_t>(M * N));
  pack_weights(weights.data(), N, K, K, packed.data());
  std::vector<double> t;
  for (int i = 0; i < calls + 2; ++i) {
    const auto t0 = Clock::now();
    packed_gemm_nt(M, N, K, A.data(), K, packed.data(), 0.f, C.data(), N);
    if (i >= 2) t.push_back(since(t0));
  }
  return 2.0 * static_cast<double>(M * N * K) / summarize(t).median / 1e9;
}

// Prefill tokens/s of one sequence of T tokens in a form (last-token logits only).
double prefill_speed(const Model& m, Form form, int64_t T) {
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
                      const std::string& json_out, const std::string& backend) {
  apply_threads(threads);
  Model m = model_path.empty() ? Model::init(Config{}, 1) : load_model(model_path);
  m.prepare_decode(DecodePrecision::F32);
  m.use_backend(backend);
  const Config& c = m.config();
  std::printf("model: %s, %lld parameters, state %s per sequence + %s per token cached\n",
              c.to_json().c_str(), (long long)m.parameter_count(),
              human_bytes(double(m.state_bytes_per_sequence())).c_str(),
              human_bytes(4.0 * c.cache_floats_per_token()).c_str());
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
                        {"cache_bytes_per_token", 4 * c.cache_floats_per_token()},
                        {"repetitions", reps}};

  // 1. Latency by position: the state does not grow, so neither does the step. Each repetition
  // visits every position in turn (and every batch size below), starting one further on each
  // time, so a machine that speeds up or slows down during the run, or a window that follows
  // another, shifts all of them alike instead of skewing the ratios (with a fixed order the
  // first-visited position ran faster: docs/design-notes.md#bench-decode-order).
  const std::vector<int64_t> positions =
      quick ? std::vector<int64_t>{16, 1024} : std::vector<int64_t>{16, 1024, 4096, 16384};
  std::printf("decode latency per token by position (batch 1, 64-step windows)\n");
  std::printf("%10s %12s %22s %10s\n", "position", "ms/token", "[min, max]", "vs 16");
  std::vector<std::vector<double>> latency(positions.size());
  {
    const PositionStates states(m, positions);
    Session s(m);
    s.add_sequence();
    for (int i = 0; i < reps; ++i)
      for (size_t n = 0; n < positions.size(); ++n) {
        const size_t j = (n + i) % positions.size();  // each repetition starts one further on
        latency[j].push_back(1e3 * states.window_latency(s, j, 64));
      }
  }
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
  std::vector<double> kernel;
  for (int i = 0; i < reps; ++i) {
    for (size_t n = 0; n < batches.size(); ++n) {
      const size_t j = (n + i) % batches.size();
      m.prepare_decode(DecodePrecision::F32);
      r32[j].push_back(batch_throughput(m, batches[j], quick ? 32 : 64));
      m.prepare_decode(DecodePrecision::F16);
      r16[j].push_back(batch_throughput(m, batches[j], quick ? 32 : 64));
    }
    kernel.push_back(packed_kernel_gflops(c, 20));
  }
  m.prepare_decode(DecodePrecision::F32);
  // The ceiling of aggregate throughput: the products alone at the kernel's in-cache speed.
  const double flop_per_token = 2.0 * static_cast<double>(product_macs_per_token(c));
  const Summary ks = summarize(kernel);
  const double ceiling = ks.median * 1e9 / flop_per_token;
  const double b1 = summarize(r32.front()).median;
  size_t best = 0;  // the fastest batch size (f32)
  double best_median = 0;
  for (size_t j = 0; j < batches.size(); ++j) {
    const Summary s = summarize(r32[j]), h = summarize(r16[j]);
    if (s.median > best_median) best = j, best_median = s.median;
    std::printf("%8lld %10.0f %10.0f, %10.0f %9.2fx %10.0f %10.0f, %10.0f %9.2fx\n",
                (long long)batches[j], s.median, s.min, s.max, s.median / b1, h.median, h.min,
                h.max, h.median / s.median);
    out["decode_tokens_per_s_by_batch"][std::to_string(batches[j])] = to_json(s);
    out["decode_tokens_per_s_by_batch_f16"][std::to_string(batches[j])] = to_json(h);
  }
  std::printf(
      "ceiling: %.2f MFLOP of weight products per token; 64-row products with their weights in "
      "cache run at %.1f GFLOP/s [%.1f, %.1f] here, so no batch size exceeds %.0f tokens/s f32 "
      "(%.2fx batch 1); the fastest, batch %lld, reaches %.0f%% of it\n",
      flop_per_token / 1e6, ks.median, ks.min, ks.max, ceiling, ceiling / b1,
      (long long)batches[best], 100 * best_median / ceiling);
  out["decode_ceiling"] = {{"product_flop_per_token", flop_per_token},
                           {"kernel_gflops_64_rows", to_json(ks)},
                           {"tokens_per_s", ceiling}};

  // 3. Prefill: the chunkwise form against the parallel form (where every layer has it).
  const bool chunkwise = c.has_form(Form::Chunkwise);
  const std::vector<int64_t> lengths =
      quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 2048, 8192};
  std::printf("\nprefill tokens/s (one sequence, last-token logits)\n");
  std::printf("%10s %14s %14s %12s\n", "T", "parallel", "chunkwise", "chunkwise/parallel");
  for (int64_t T : lengths) {
    std::vector<double> par, chk;
    prefill_speed(m, chunkwise ? Form::Chunkwise : Form::Parallel, T);  // warm-up
    for (int i = 0; i < reps; ++i) {
      par.push_back(prefill_speed(m, Form::Parallel, T));
      if (chunkwise) chk.push_back(prefill_speed(m, Form::Chunkwise, T));
    }
    Summary sp = summarize(par);
    out["prefill_tokens_per_s"][std::to_string(T)] = {{"parallel", to_json(sp)}};
    if (!chunkwise) {
      std::printf("%10lld %14.0f %14s %12s\n", (long long)T, sp.median, "(none)", "");
      continue;
    }
    Summary sc = summarize(chk);
    std::printf("%10lld %14.0f %14.0f %12.2fx\n", (long long)T, sp.median, sc.median,
                sc.median / sp.median);
    out["prefill_tokens_per_s"][std::to_string(T)]["chunkwise"] = to_json(sc);
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  out["peak_rss_bytes"] = 1024 * static_cast<int64_t>(ru.ru_maxrss);
  std::printf("\npeak RSS %s\n", human_bytes(1024.0 * ru.ru_maxrss).c_str());
  if (!json_out.empty()) write_json(json_out, out);
}

}  // namespace

// `retnet bench serve` (cmd_bench_serve.cpp): the server under load, and its soak.
void register_bench_serve(CLI::App* bench);
void register_bench_speculative(CLI::App* bench);

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench",
                                   "Benchmarks that print ratios against a baseline "
                                   "measured in the same run");
  bench->require_subcommand(1);
  struct Opts {
    std::string model, json, backend = "cpu";
    int reps = 5, threads = 0;
    bool quick = false;
  };
  auto [o, dec] = add_bench_subcommand<Opts>(
      bench, "decode",
      "Decode latency by position, decode throughput by batch against the machine's ceiling "
      "for it (the weight products at the kernel's in-cache speed), prefill chunkwise vs "
      "parallel");
  dec->add_option("--model,-m", o->model, "Model file (default: the default config, initialised)");
  dec->add_flag("--quick", o->quick, "Fewer positions, batches and lengths (a smoke test)");
  add_bench_run_options(dec, o->reps, o->threads, o->json);
  add_backend_option(dec, o->backend);
  dec->callback(
      [o = o] { run_bench_decode(o->model, o->reps, o->quick, o->threads, o->json, o->backend); });
  register_bench_family(bench);
  register_bench_paper(bench);
  register_bench_model(bench);
  register_bench_serve(bench);
  register_bench_speculative(bench);
}

}  // namespace retnet::cli
