// `retnet bench model`: one model (a file or a Hugging Face directory) as a user meets it: load
// time and resident memory, prefill speed against the GEMM ceiling, batch-1 decode speed against
// the memory-bandwidth roofline, both ceilings measured in the same run.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/cpu_isa.h"
#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"
#include "retnet/core/process_memory.h"
#include "retnet/infer/session.h"
#include "retnet/model/model_io.h"
#include "retnet/model/quant_io.h"

namespace retnet::cli {
namespace {

// Before and after probes further apart than this ratio: the bandwidth moved during the decode.
constexpr double kBandwidthMovedSpread = 1.25;

// STREAM-like read bandwidth (bytes per second): sums over a buffer far larger than any cache
// (2 GiB by default; some hosts report an L3 of hundreds of MiB), each thread reading its share as
// 1, 2 or 4 streams side by side, 64 floats at a time into independent partial sums (one
// accumulator would make the adds' latency, not memory, the limit). The best of `passes` passes over
// the best stream count: one stream per thread reads less than the decode kernels do, which would
// flatter every roofline fraction (docs/design-notes.md#bandwidth-probe).
double read_bandwidth(int passes, int64_t buffer_mib) {
  const int64_t n = buffer_mib << 18, run = 64;  // floats, read 256 bytes at a time
  constexpr int kMaxStreams = 4;
  std::vector<float> buffer(static_cast<size_t>(n), 1.f);
  double best = 1e30, sink = 0;
  for (const int streams : {1, 2, kMaxStreams})
    for (int r = 0; r < passes; ++r) {
      const auto t0 = Clock::now();
      double total = 0;
      int64_t read = 0;  // floats: the shares are rounded down to whole runs of every stream
#pragma omp parallel reduction(+ : total, read)
      {
        const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t share = n / threads / (streams * run) * (streams * run);
        read += share;
        const int64_t stretch = share / streams;  // each stream reads one stretch of the share
        const float* first = buffer.data() + t * share;
        float partial[kMaxStreams][run] = {};
        for (int64_t j = 0; j < stretch; j += run)
          for (int s = 0; s < streams; ++s) {
            const float* p = first + s * stretch + j;
#pragma omp simd
            for (int k = 0; k < run; ++k) partial[s][k] += p[k];
          }
        for (const auto& sums : partial)
          for (float x : sums) total += x;
      }
      best = std::min(best, since(t0) / static_cast<double>(read));
      sink += total;
    }
  if (sink < 0) std::printf("%f", sink);  // keeps the sums alive
  return sizeof(float) / best;
}

// sgemm at a prefill's shape: T rows through the model's widest projection (FLOPs per second).
double gemm_ceiling(const Config& c, int64_t T, int reps) {
  const int64_t K = c.embed_dim, N = c.max_projection_width();
  std::vector<float> a(T * K, 0.5f), b(N * K, 0.25f), out(T * N);
  double best = 1e30;
  // Best of at least 5: on a shared machine single calls of this size vary widely
  // (docs/design-notes.md#bandwidth-probe).
  for (int r = 0; r < std::max(reps, 5); ++r) {
    const auto t0 = Clock::now();
    sgemm(Trans::No, Trans::Yes, T, N, K, 1.f, a.data(), K, b.data(), K, 0.f, out.data(), N);
    best = std::min(best, since(t0));
  }
  return 2.0 * static_cast<double>(T * N * K) / best;
}

// Bytes a batch-1 decode step reads: every weight matrix once (in the decode precision) and one
// embedding row; norms and states are small beside them.
double decode_bytes_per_token(const Model& m, double bytes_per_weight) {
  const Config& c = m.config();
  // (A tied embedding is the LM head: its one matrix is multiplied.)
  const double matrices = static_cast<double>(c.parameter_count() -
                                              (c.tie_embeddings ? 0 : c.vocab_size * c.embed_dim));
  return matrices * bytes_per_weight + 4.0 * static_cast<double>(c.embed_dim);
}

struct BenchModelOptions {
  std::string model, json, backend = "cpu";
  std::vector<std::string> dtypes = {"f32"};
  std::vector<int64_t> prefill = {512, 4096};
  int64_t decode = 1000;
  int64_t probe_mib = 2048;
  int reps = 3, threads = 0;
  bool no_mmap = false;
};

// Loads the model, prepares it in `dtype` and measures it; the read bandwidth is the run's.
nlohmann::ordered_json run_dtype(const BenchModelOptions& o, const std::string& dtype,
                                 double run_bandwidth) {
  nlohmann::ordered_json out;
  LoadInfo li;
  // Loaded straight into the packed weights (a directory: tensor by tensor; a quantised file in
  // its own type). The peak is reset first, so that it is this load's, not an earlier type's.
  const bool own_peak = reset_peak_rss();
  Model model = load_model_for_inference(o.model, std::nullopt,
                                         parse_decode_precision(dtype, "--dtype"), &li,
                                         !o.no_mmap);
  model.use_backend(o.backend);
  const Config& c = model.config();
  const int64_t rss_load = current_rss_bytes(), rss_peak = peak_rss_bytes();
  const double prepare_s = li.prepare_seconds;  // part of the load
  const int64_t rss_ready = rss_load;
  const DecodePrecision precision = model.decode_precision();
  const std::string weights = decode_precision_name(precision);
  const bool quantised = decode_quant_type(precision).has_value();
  // The bytes of the weights as held: the unit of the RSS goal. Quantised: the blocks (and a head
  // kept in f32) plus the float32 rest (embedding, norms).
  int64_t projection_params = 0;
  for (auto [index, K] : model.projection_tensors())
    projection_params += static_cast<int64_t>(std::as_const(model).params().layout()[index].numel);
  const double weight_bytes =
      quantised ? static_cast<double>(model.packed_bytes() +
                                      4 * (model.parameter_count() - projection_params))
                : static_cast<double>(model.parameter_count() * decode_precision_bytes(precision));
  std::printf("== %s\nmodel %s: %lld parameters, stored %s (%s)\n", weights.c_str(),
              o.model.c_str(), (long long)model.parameter_count(), li.source_dtype.c_str(),
              human_bytes(double(li.stored_bytes)).c_str());
  std::printf(
      "load into %s %.3f s (open %.3f s, prepare %.3f s; %s used in place): peak RSS%s %s = "
      "%.2fx, RSS after %s = %.2fx the weights in %s (%s)\n",
      weights.c_str(), li.load_seconds, li.open_seconds, li.prepare_seconds,
      human_bytes(double(model.in_place_bytes())).c_str(),
      own_peak ? "" : " (the process's so far)", human_bytes(double(rss_peak)).c_str(),
      rss_peak / weight_bytes, human_bytes(double(rss_ready)).c_str(), rss_ready / weight_bytes,
      weights.c_str(), human_bytes(weight_bytes).c_str());
  out["model"] = {{"path", o.model}, {"parameters", model.parameter_count()},
                  {"stored_dtype", li.source_dtype}, {"stored_bytes", li.stored_bytes},
                  {"load_seconds", li.load_seconds}, {"open_seconds", li.open_seconds},
                  {"rss_after_load_bytes", rss_load},
                  {"weights_in_place_bytes", model.in_place_bytes()},
                  {"dtype", weights}, {"bits_per_weight", decode_precision_bits(precision)},
                  {"prepare_seconds", prepare_s}, {"weight_bytes_in_dtype", weight_bytes},
                  {"rss_after_prepare_bytes", rss_ready},
                  {"peak_rss_during_load_bytes", rss_peak},
                  {"peak_rss_is_this_load_only", own_peak},
                  {"peak_rss_during_load_over_weight_bytes", rss_peak / weight_bytes},
                  {"rss_after_prepare_over_weight_bytes", rss_ready / weight_bytes}};

  nlohmann::json prefill = nlohmann::json::array();
  for (int64_t T : o.prefill) {
    const double ceiling = gemm_ceiling(c, std::min<int64_t>(T, 2048), o.reps);
    std::vector<double> seconds;
    const std::vector<int32_t> tokens = bench_tokens(T, c.vocab_size, 7);
    for (int r = 0; r < o.reps; ++r) {
      Session s(model);
      s.add_sequence();
      const auto t0 = Clock::now();
      s.prefill(0, tokens.data(), T);
      seconds.push_back(since(t0));
    }
    const double t = summarize(seconds).median;
    // Matrix FLOPs only (2 per weight per token): the part the GEMM ceiling bounds.
    const double flops =
        2.0 * static_cast<double>(c.parameter_count() -
                                  (c.tie_embeddings ? 0 : c.vocab_size * c.embed_dim));
    const double tps = static_cast<double>(T) / t, fraction = tps * flops / ceiling;
    std::printf("prefill %5lld tokens: %8.1f tokens/s, %5.1f%% of the GEMM ceiling (%.1f GFLOP/s)\n",
                (long long)T, tps, 100 * fraction, ceiling / 1e9);
    prefill.push_back({{"tokens", T}, {"tokens_per_s", tps}, {"gemm_gflops", ceiling / 1e9},
                       {"fraction_of_gemm_ceiling", fraction}});
  }
  out["prefill"] = prefill;

  // Quantised: the blocks every step streams (packed_bytes) and one embedding row.
  const double bytes =
      quantised ? static_cast<double>(model.packed_bytes()) + 4.0 * static_cast<double>(c.embed_dim)
                : decode_bytes_per_token(model, precision == DecodePrecision::F32 ? 4.0 : 2.0);
  Session s(model);
  s.add_sequence();
  const std::vector<int32_t> prompt = bench_tokens(16, c.vocab_size, 3);
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  std::vector<double> step_seconds;
  // The machine's bandwidth can move within minutes (docs/design-notes.md#bandwidth-probe), so
  // the roofline takes the best of that probe and two taken just before and after this decode.
  const double before = read_bandwidth(2, o.probe_mib);
  for (int64_t i = 0; i < o.decode; ++i) {
    const int32_t next = static_cast<int32_t>((i * 7919) % c.vocab_size);
    const auto t0 = Clock::now();
    s.step(&next);
    step_seconds.push_back(since(t0));
  }
  const double after = read_bandwidth(2, o.probe_mib);
  const double probes[] = {run_bandwidth, before, after};
  const double bandwidth = *std::max_element(std::begin(probes), std::end(probes));
  const double tps = 1.0 / summarize(step_seconds).median, roofline = bandwidth / bytes;
  // Beside the weights, each step reads and writes the constant-size recurrent state once (96
  // MiB each way for the 1.3B shape): the roofline (weight bytes / bandwidth) leaves it out; the
  // second figure counts it.
  const double state_traffic = 2.0 * static_cast<double>(model.state_bytes_per_sequence());
  const double roofline_with_state = bandwidth / (bytes + state_traffic);
  const int64_t rss_decoded = current_rss_bytes();
  std::printf("decode batch 1 (%lld tokens): %.2f tokens/s; roofline %.2f tokens/s (%s per token "
              "at %.1f GB/s read, the best of %.1f / %.1f / %.1f at the run's start / before / "
              "after this decode): %.0f%% of it; %.0f%% of %.2f tokens/s counting the state read "
              "and written (%s)\n",
              (long long)o.decode, tps, roofline, human_bytes(bytes).c_str(), bandwidth / 1e9,
              run_bandwidth / 1e9, before / 1e9, after / 1e9, 100 * tps / roofline,
              100 * tps / roofline_with_state, roofline_with_state,
              human_bytes(state_traffic).c_str());
  // Probes that disagree mean the bandwidth moved during the decode: its fraction of the best
  // probe is then a lower bound, and single runs are not worth comparing.
  const double spread = std::max(before, after) / std::min(before, after);
  const bool bandwidth_moved = spread > kBandwidthMovedSpread;
  if (bandwidth_moved)
    std::printf("note: the read bandwidth moved during this decode (%.1f GB/s before, %.1f after): "
                "the fraction of the roofline is a lower bound; compare runs whose probes agree\n",
                before / 1e9, after / 1e9);
  std::printf("RSS after decoding: %s = %.2fx the weights in %s (%s)\n",
              human_bytes(double(rss_decoded)).c_str(), rss_decoded / weight_bytes,
              weights.c_str(), human_bytes(weight_bytes).c_str());
  out["decode"] = {{"tokens", o.decode}, {"tokens_per_s", tps},
                   {"read_bandwidth_bytes_per_s", bandwidth},
                   {"read_bandwidth_probes_bytes_per_s", probes},
                   {"read_bandwidth_before_after_spread", spread},
                   {"read_bandwidth_moved", bandwidth_moved}, {"bytes_per_token", bytes},
                   {"roofline_tokens_per_s", roofline}, {"fraction_of_roofline", tps / roofline},
                   {"state_bytes_read_and_written_per_token", state_traffic},
                   {"roofline_with_state_tokens_per_s", roofline_with_state},
                   {"fraction_of_roofline_with_state", tps / roofline_with_state},
                   {"rss_after_decoding_bytes", rss_decoded},
                   {"rss_after_decoding_over_weight_bytes", rss_decoded / weight_bytes}};
  return out;
}

void run(const BenchModelOptions& o) {
  apply_threads(o.threads);
  nlohmann::ordered_json out;
  out["machine"] = machine_json();
  // Which decode kernels this CPU gets: figures differ by them, so they go with every run.
  std::printf("machine: %s, %d threads; decode kernels: row-major weights %s, quantised %s%s\n",
              out["machine"]["cpu"].get<std::string>().c_str(), num_threads(),
              out["machine"]["rowmajor_decode_kernel"].get<std::string>().c_str(),
              out["machine"]["quant_decode_kernel"].get<std::string>().c_str(),
              isa_cap() == Isa::Avx512
                  ? ""
                  : fmt::format(" (capped by RETNET_MAX_ISA={})", isa_name(isa_cap())).c_str());
  const double bandwidth = read_bandwidth(std::max(o.reps, 5), o.probe_mib);
  std::vector<nlohmann::ordered_json> runs;
  for (const std::string& dtype : o.dtypes) runs.push_back(run_dtype(o, dtype, bandwidth));
  if (runs.size() == 1) {  // one dtype: the layout this command always wrote
    for (auto& [key, value] : runs[0].items()) out[key] = value;
  } else {
    // Several: each one's results, and decode speed relative to the first, from the same run.
    const double first = runs[0]["decode"]["tokens_per_s"].get<double>();
    std::printf("\n%-6s %12s %12s %10s %12s\n", "dtype", "bits/weight", "decode t/s",
                "vs first", "of roofline");
    for (auto& r : runs) {
      const double tps = r["decode"]["tokens_per_s"].get<double>();
      r["decode"]["speedup_over_first"] = tps / first;
      std::printf("%-6s %12.2f %12.2f %9.2fx %11.0f%%\n",
                  r["model"]["dtype"].get<std::string>().c_str(),
                  r["model"]["bits_per_weight"].get<double>(), tps, tps / first,
                  100 * r["decode"]["fraction_of_roofline"].get<double>());
    }
    out["runs"] = runs;
  }
  if (!o.json.empty()) write_json(o.json, out);
}

}  // namespace

void register_bench_model(CLI::App* bench) {
  auto [o, cmd] = add_bench_subcommand<BenchModelOptions>(
      bench, "model",
      "One model file or Hugging Face directory: load time and RSS, prefill tokens/s against the "
      "GEMM ceiling, batch-1 decode tokens/s against the memory-bandwidth roofline (weight bytes "
      "per token / a STREAM-like read bandwidth), both measured in the same run");
  cmd->add_option("--model,-m", o->model, "Model .safetensors file or directory")->required();
  add_bench_dtypes_option(cmd, o->dtypes,
                          "Weights used for inference: f32, bf16, f16, q8_0, q4_1, q4_0; several "
                          "(comma-separated) are measured one after another in the same run, "
                          "with decode speed relative to the first");
  cmd->add_option("--prefill", o->prefill, "Prompt lengths to time")->capture_default_str();
  add_checked(cmd, "--decode", o->decode, "Tokens to decode", integer_at_least(1));
  add_checked(cmd, "--probe-mib", o->probe_mib,
              "Buffer the read-bandwidth probe streams, in MiB: far larger than the last-level "
              "cache, or the roofline is the cache's",
              integer_within(1, 1 << 20));
  add_bench_run_options(cmd, o->reps, o->threads, o->json);
  add_backend_option(cmd, o->backend);
  cmd->add_flag("--no-mmap", o->no_mmap,
                "Pack every weight at load instead of using a directory's tensors stored in the "
                "dtype where they lie in the mapped files");
  cmd->callback([o = o] { run(*o); });
}

}  // namespace retnet::cli
