// `retnet bench paper`: the RetNet paper's headline claims (inference memory, decode latency and
// throughput, training speed and memory, the retention heads sweep) measured for a RetNet and a
// softmax transformer of the same size built by this engine, in one run with the same build and
// threads. Results go to DIR/results.json, plots (plot_paper.py, installed beside the binary) to DIR/*.png.
//
// Peak memory is a per-point property of a process, so each memory point runs in a fresh process:
// this binary re-executed (/proc/self/exe, posix_spawn: OpenMP is not fork-safe) with the hidden
// subcommand `bench paper-probe`, which runs one measurement and prints one JSON line.
//
// The transformer's KV cache is filled synthetically (small pseudo-random keys and values) rather
// than by a prefill: a decode step's cost and memory do not depend on the values, and prefilling
// 32k tokens costs O(T^2). RetNet's state is prefilled for real (chunkwise, blocks of 2048) in the
// memory figure, and filled synthetically in the decode figure (its size does not grow).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "bench_common.h"
#include "commands.h"
#include "retention_bench_setup.h"
#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/core/rng.h"
#include "retnet/infer/session.h"
#include "retnet/mixers/retention.h"
#include "retnet/model/training.h"
#include "retnet/train/optimizer.h"

namespace retnet::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct PaperOptions {
  std::string out = "bench-paper";
  int reps = 5, threads = 0;
  bool quick = false, smoke = false, no_plot = false;
  double train_cap_s = 0;   // 0: by mode
  double mem_cap_gib = 0;   // 0: 60% of MemAvailable at start
};

struct Plan {
  std::string mode;
  std::vector<int64_t> mem_lengths, batches, train_lengths, heads;
  int mem_reps, decode_reps, decode_window, train_reps, heads_reps;
  double train_cap_s;
};

Plan make_plan(const PaperOptions& o) {
  Plan p;
  if (o.smoke) {
    p = {"smoke", {1024, 8192}, {1, 2}, {512, 1024}, {8, 64}, 1, 1, 2, 1, 1, 5};
  } else if (o.quick) {
    p = {"quick", {1024, 2048, 8192, 32768}, {1, 4, 16, 64}, {512, 2048, 8192}, {1, 8, 64, 256},
         2, 3, 4, 2, 2, 10};
  } else {
    p = {"full",
         {1024, 2048, 4096, 8192, 16384, 32768},
         {1, 2, 4, 8, 16, 32, 64},
         {512, 1024, 2048, 4096, 8192, 16384},
         {1, 2, 4, 8, 16, 32, 64, 128, 256},
         o.reps, o.reps, 8, o.reps, o.reps, 30};
  }
  if (o.train_cap_s > 0) p.train_cap_s = o.train_cap_s;
  return p;
}

std::string kstr(int64_t n) {
  return n % 1024 == 0 ? std::to_string(n / 1024) + "k" : std::to_string(n);
}

json skipped(const std::string& reason) { return {{"status", "skipped"}, {"reason", reason}}; }
bool is_skipped(const json& j) { return j.is_object() && j.contains("status"); }

// ---------------------------------------------------------------- probes (child processes)

// Memory of a process that brings one sequence to position T and decodes `steps` tokens.
json probe_memory(const MixerSpec* kind, int64_t T, int64_t steps) {
  const Config c = family_config(kind);
  Model m = Model::init(c, 1);
  m.prepare_decode(DecodePrecision::F32);
  const int64_t rss_init = current_rss_bytes();
  std::vector<int32_t> tokens(1, 1);
  int64_t state_bytes = 0;
  bool synthetic = false;
  if (kind->keeps_tokens) {
    synthetic = true;
    State s = synthetic_state(m, 1, T, steps);
    ForwardOptions fo;
    fo.form = Form::Recurrent;
    Arena arena;
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    for (int64_t i = 0; i < steps; ++i)
      forward_logits(m, tokens.data(), 1, 1, logits.data(), fo, arena, &s);
    state_bytes = static_cast<int64_t>(s.data.size() * sizeof(float) + s.cache.bytes());
  } else {
    Session s(m);
    s.add_sequence();
    auto prompt = bench_tokens(T, c.vocab_size);
    s.prefill(0, prompt.data(), T);
    for (int64_t i = 0; i < steps; ++i) s.step(tokens.data());
    state_bytes = s.state_bytes(0);
  }
  return {{"peak_rss_bytes", peak_rss_bytes()},
          {"rss_after_init_bytes", rss_init},
          {"state_bytes", state_bytes},
          {"weights_bytes", m.parameter_count() * 4},
          {"synthetic_cache", synthetic}};
}

// Training steps (forward, backward, clipping, AdamW) at batch 1 x T: tokens/s and peak memory.
json probe_train(const MixerSpec* kind, Form form, int64_t T, int reps, double cap_s) {
  const Config c = family_config(kind);
  Model m = Model::init(c, 1);
  auto tok = bench_tokens(T + 1, c.vocab_size, 7);
  std::vector<int32_t> in(tok.begin(), tok.end() - 1), tgt(tok.begin() + 1, tok.end());
  TrainingOptions to;
  to.form = form;
  Arena arena;
  ParamBuffer grads(m.params().layout());
  AdamW opt(m.params().layout(), AdamWOptions{});
  std::vector<double> step_s, tps;
  for (int i = 0; i < reps + 1; ++i) {  // the first step pays for allocation
    auto t0 = Clock::now();
    std::fill(grads.data(), grads.data() + grads.size(), 0.f);
    loss_and_gradients(m, in.data(), tgt.data(), 1, T, to, arena, &grads);
    clip_gradients(grads, 1.0);
    opt.update(m.params(), grads, 1e-4);
    const double dt = since(t0);
    if (i == 0 && dt > cap_s)
      return {{"status", "skipped"},
              {"reason", fmt::format("a training step took {:.1f} s, over the cap of {:.0f} s "
                                     "(--train-cap)",
                                     dt, cap_s)},
              {"step_s", dt}};
    if (i > 0) step_s.push_back(dt), tps.push_back(static_cast<double>(T) / dt);
  }
  return {{"tokens_per_s", to_json(summarize(tps))},
          {"step_s", to_json(summarize(step_s))},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"workspace_bytes", 4 * static_cast<int64_t>(training_workspace_floats(c, 1, T, to))}};
}

// ---------------------------------------------------------------- in-process measurements

// Per-step latency (ms) and aggregate tokens/s of B sequences decoding together at `context`.
json decode_point(const Model& m, int64_t B, int64_t context, int reps, int window) {
  const int warm = 2;
  State s = synthetic_state(m, B, context, int64_t{reps} * (window + warm) + 4);
  ForwardOptions fo;
  fo.form = Form::Recurrent;
  Arena arena;
  const int64_t V = m.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(B * V));
  std::vector<int32_t> tokens(static_cast<size_t>(B), 1);
  std::vector<double> lat, tps;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> t;
    for (int i = 0; i < warm + window; ++i) {
      auto t0 = Clock::now();
      forward_logits(m, tokens.data(), B, 1, logits.data(), fo, arena, &s);
      if (i >= warm) t.push_back(since(t0));
      for (int64_t b = 0; b < B; ++b)
        tokens[b] = static_cast<int32_t>(
            std::max_element(logits.begin() + b * V, logits.begin() + (b + 1) * V) -
            (logits.begin() + b * V));
    }
    double total = 0;
    for (double x : t) total += x;
    lat.push_back(1e3 * summarize(t).median);
    tps.push_back(static_cast<double>(B) * window / total);
  }
  return {{"latency_ms", to_json(summarize(lat))}, {"tokens_per_s", to_json(summarize(tps))}};
}

// The heads sweep: one retention kernel call (retention_forward alone) at T = 2048 and 512 key and 512
// value channels split over H heads; milliseconds per call.
Summary heads_point(Form form, int64_t H, int reps) {
  RetentionBenchSetup setup(H, /*chunk=*/64);
  Arena arena(setup.workspace_floats(form));
  std::vector<double> ms;
  for (int i = 0; i < reps + 1; ++i) {  // one warm-up call
    std::fill(setup.state.begin(), setup.state.end(), 0.f);
    arena.reset();
    auto t0 = Clock::now();
    retention_forward(form, setup.args, arena);
    if (i > 0) ms.push_back(1e3 * since(t0));
  }
  return summarize(ms);
}

// ---------------------------------------------------------------- the figures

const MixerSpec* const kRet = &find_mixer("retention");
const MixerSpec* const kAtt = &find_mixer("attention");

json figure_memory(const Plan& p, int threads) {
  json fig = {{"lengths", p.mem_lengths},
              {"repetitions", p.mem_reps},
              {"decode_steps_after", 16},
              {"note",
               "one fresh process per point and repetition: init, bring one sequence to the length "
               "(RetNet: a real chunkwise prefill; transformer: KV cache filled synthetically, "
               "capacity = length + 16), decode 16 tokens; weights_plus_state = float32 "
               "parameters + the state or cache allocated"}};
  std::printf("\n[1/5] inference memory by length (fresh process per point)\n");
  std::printf("%-12s %8s %14s %14s %14s\n", "model", "length", "state/cache", "weights+state",
              "peak RSS");
  for (auto [name, kind] : {std::pair{"retnet", kRet}, std::pair{"transformer", kAtt}}) {
    for (int64_t T : p.mem_lengths) {
      std::vector<double> rss;
      json last;
      for (int r = 0; r < p.mem_reps; ++r) {
        last = run_probe({"bench", "paper-probe", "--what", "memory", "--mixer", kind->name,
                          "--length", std::to_string(T), "--threads", std::to_string(threads)});
        if (is_skipped(last)) break;
        rss.push_back(last["peak_rss_bytes"].get<double>());
      }
      if (is_skipped(last)) {
        fig[name][std::to_string(T)] = last;
        std::printf("%-12s %8s  skipped: %s\n", name, kstr(T).c_str(),
                    last["reason"].get<std::string>().c_str());
        continue;
      }
      const Summary s = summarize(rss);
      const int64_t state = last["state_bytes"], weights = last["weights_bytes"];
      fig[name][std::to_string(T)] = {{"state_bytes", state},
                                      {"weights_bytes", weights},
                                      {"weights_plus_state_bytes", state + weights},
                                      {"peak_rss_bytes", to_json(s)},
                                      {"rss_after_init_bytes", last["rss_after_init_bytes"]},
                                      {"synthetic_cache", last["synthetic_cache"]}};
      std::printf("%-12s %8s %14s %14s %14s\n", name, kstr(T).c_str(),
                  human_bytes(double(state)).c_str(), human_bytes(double(state + weights)).c_str(),
                  human_bytes(s.median).c_str());
      std::fflush(stdout);
    }
  }
  return fig;
}

json figure_decode(const Plan& p, const Model& ret, const Model& att, double mem_cap) {
  json fig = {{"batches", p.batches},
              {"repetitions", p.decode_reps},
              {"window_steps", p.decode_window},
              {"note",
               "states and KV caches filled synthetically at the context (a step's cost does not "
               "depend on the values); latency = median time of one step of the whole batch; "
               "throughput = batch x steps / time"}};
  std::printf("\n[2-3/5] decode latency and throughput by batch size\n");
  std::printf("%-18s %6s %12s %22s %12s\n", "model @ context", "batch", "ms/step", "[min, max]",
              "tokens/s");
  struct Series {
    const char* name;
    const Model* m;
    int64_t context;
  };
  for (const Series& s : {Series{"retnet@8192", &ret, 8192}, Series{"transformer@8192", &att, 8192},
                          Series{"transformer@1024", &att, 1024}}) {
    const Config& c = s.m->config();
    for (int64_t B : p.batches) {
      const double bytes =
          4.0 * B *
          (c.state_floats_per_sequence() +
           double(s.context + 64) * c.cache_floats_per_token());
      json r;
      if (bytes > mem_cap) {
        r = skipped(fmt::format("the states would take {}, over the memory cap of {}",
                                human_bytes(bytes), human_bytes(mem_cap)));
        std::printf("%-18s %6lld  skipped: %s\n", s.name, (long long)B,
                    r["reason"].get<std::string>().c_str());
      } else {
        r = decode_point(*s.m, B, s.context, p.decode_reps, p.decode_window);
        std::printf("%-18s %6lld %12.3f %10.3f, %9.3f %12.0f\n", s.name, (long long)B,
                    r["latency_ms"]["median"].get<double>(), r["latency_ms"]["min"].get<double>(),
                    r["latency_ms"]["max"].get<double>(), r["tokens_per_s"]["median"].get<double>());
      }
      std::fflush(stdout);
      fig["series"][s.name][std::to_string(B)] = r;
    }
  }
  return fig;
}

json figure_training(const Plan& p, int threads, double mem_cap) {
  json fig = {{"lengths", p.train_lengths},
              {"batch", 1},
              {"repetitions", p.train_reps},
              {"step_cap_s", p.train_cap_s},
              {"note",
               "one fresh process per point: one warm-up step then the timed steps (forward, "
               "backward, clipping, AdamW); peak RSS of that process; a point is skipped when its "
               "estimated memory exceeds the cap, its step is predicted (from the previous length: "
               "x2 per doubling for chunkwise, x4 for the quadratic forms) or measured to exceed "
               "the step cap"}};
  std::printf("\n[4/5] training tokens/s and peak memory by length (batch 1, fresh process)\n");
  std::printf("%-22s %8s %12s %22s %12s\n", "series", "length", "tokens/s", "[min, max]",
              "peak RSS");
  struct Series {
    const char* name;
    const MixerSpec* kind;
    Form form;
    bool quadratic;
  };
  for (const Series& s :
       {Series{"retention-parallel", kRet, Form::Parallel, true},
        Series{"retention-chunkwise", kRet, Form::Chunkwise, false},
        Series{"attention-tiled", kAtt, Form::Parallel, true}}) {
    const Config c = family_config(s.kind);
    double prev_step = 0;
    int64_t prev_T = 0;
    std::string stop;
    for (int64_t T : p.train_lengths) {
      TrainingOptions to;
      to.form = s.form;
      const double est = 4.0 * double(training_workspace_floats(c, 1, T, to)) +
                         16.0 * double(c.parameter_count());
      json r;
      const double ratio = prev_T ? double(T) / double(prev_T) : 1;
      const double predicted = prev_step * (s.quadratic ? ratio * ratio : ratio);
      if (!stop.empty()) {
        r = skipped(stop);
      } else if (est > mem_cap) {
        r = skipped(fmt::format("estimated memory {} (workspace + parameters, gradients, AdamW "
                                "moments) over the cap of {}",
                                human_bytes(est), human_bytes(mem_cap)));
      } else if (predicted > p.train_cap_s) {
        r = skipped(fmt::format("a step predicted to take {:.0f} s (from {:.1f} s at {}), over "
                                "the cap of {:.0f} s (--train-cap)",
                                predicted, prev_step, kstr(prev_T), p.train_cap_s));
      } else {
        r = run_probe({"bench", "paper-probe", "--what", "train", "--mixer", s.kind->name,
                       "--form", form_name(s.form), "--length", std::to_string(T),
                       "--reps", std::to_string(p.train_reps), "--threads",
                       std::to_string(threads), "--cap", fmt::format("{}", p.train_cap_s)});
      }
      if (is_skipped(r)) {
        if (stop.empty()) stop = "a shorter length was skipped (" + kstr(T) + ")";
        std::printf("%-22s %8s  skipped: %s\n", s.name, kstr(T).c_str(),
                    r["reason"].get<std::string>().c_str());
      } else {
        prev_step = r["step_s"]["median"];
        prev_T = T;
        std::printf("%-22s %8s %12.0f %10.0f, %9.0f %12s\n", s.name, kstr(T).c_str(),
                    r["tokens_per_s"]["median"].get<double>(),
                    r["tokens_per_s"]["min"].get<double>(), r["tokens_per_s"]["max"].get<double>(),
                    human_bytes(r["peak_rss_bytes"].get<double>()).c_str());
      }
      std::fflush(stdout);
      fig["series"][s.name][std::to_string(T)] = r;
    }
  }
  return fig;
}

json figure_heads(const Plan& p) {
  json fig = {{"T", 2048},
              {"channels", 512},
              {"heads", p.heads},
              {"repetitions", p.heads_reps},
              {"chunk", 64},
              {"note", "retention_forward alone (one layer's kernel), ms per call"}};
  std::printf("\n[5/5] heads sweep: one retention kernel call, T 2048, 512 channels, "
              "ms\n%8s", "heads");
  const std::pair<const char*, Form> forms[] = {{"parallel", Form::Parallel},
                                                         {"recurrent", Form::Recurrent},
                                                         {"chunkwise", Form::Chunkwise},
                                                         {"scan", Form::Scan}};
  for (auto& f : forms) std::printf(" %12s", f.first);
  std::printf("\n");
  for (int64_t H : p.heads) {
    std::printf("%8lld", (long long)H);
    for (auto& [name, form] : forms) {
      const Summary s = heads_point(form, H, p.heads_reps);
      fig["forms"][name][std::to_string(H)] = to_json(s);
      std::printf(" %12.2f", s.median);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return fig;
}

// ---------------------------------------------------------------- headline ratios

const json* find(const json& j, std::initializer_list<std::string> path) {
  const json* cur = &j;
  for (const auto& k : path) {
    if (!cur->is_object() || !cur->contains(k)) return nullptr;
    cur = &(*cur)[k];
  }
  return is_skipped(*cur) ? nullptr : cur;
}

// RetNet's advantage: how many times less memory or latency, or more throughput.
json ratios(const json& figs, const Plan& p) {
  json out = json::array();
  auto add = [&](std::string claim, double retnet, double transformer, bool lower_is_better,
                 std::string unit, std::string paper) {
    const double adv = lower_is_better ? transformer / retnet : retnet / transformer;
    out.push_back({{"claim", claim},
                   {"retnet", retnet},
                   {"transformer", transformer},
                   {"unit", unit},
                   {"retnet_advantage", adv},
                   {"paper", paper}});
  };
  const json& mem = figs["inference_memory"];
  for (int64_t T : {int64_t{8192}}) {
    const std::string k = std::to_string(T);
    if (auto *r = find(mem, {"retnet", k}), *a = find(mem, {"transformer", k}); r && a) {
      add("inference memory at " + kstr(T) + ", weights + state", (*r)["weights_plus_state_bytes"],
          (*a)["weights_plus_state_bytes"], true, "bytes", "3.4x less (6.7B, A100, 8k)");
      add("inference peak RSS at " + kstr(T), (*r)["peak_rss_bytes"]["median"],
          (*a)["peak_rss_bytes"]["median"], true, "bytes", "3.4x less (6.7B, A100, 8k)");
    }
  }
  const json& dec = figs["decode"];
  int64_t bmax = 0;
  for (int64_t B : p.batches)
    if (find(dec, {"series", "retnet@8192", std::to_string(B)}) &&
        find(dec, {"series", "transformer@8192", std::to_string(B)}))
      bmax = B;
  if (bmax > 0) {
    const std::string b = std::to_string(bmax);
    add("decode throughput at 8k, batch " + b,
        (*find(dec, {"series", "retnet@8192", b}))["tokens_per_s"]["median"],
        (*find(dec, {"series", "transformer@8192", b}))["tokens_per_s"]["median"], false,
        "tokens/s", "8.4x higher (6.7B, A100, 8k)");
    add("decode latency at 8k, batch " + b,
        (*find(dec, {"series", "retnet@8192", b}))["latency_ms"]["median"],
        (*find(dec, {"series", "transformer@8192", b}))["latency_ms"]["median"], true, "ms/step",
        "15.6x lower (6.7B, A100, 8k)");
  }
  if (auto *r = find(dec, {"series", "retnet@8192", "1"}),
      *a = find(dec, {"series", "transformer@8192", "1"});
      r && a)
    add("decode latency at 8k, batch 1", (*r)["latency_ms"]["median"],
        (*a)["latency_ms"]["median"], true, "ms/step", "15.6x lower (6.7B, A100, 8k)");
  // Training: at 8k, or the longest length both forms reached.
  const json& tr = figs["training"];
  int64_t tmax = 0;
  for (int64_t T : p.train_lengths)
    if (T <= 8192 && find(tr, {"series", "retention-chunkwise", std::to_string(T)}) &&
        find(tr, {"series", "attention-tiled", std::to_string(T)}))
      tmax = T;
  if (tmax > 0) {
    const std::string t = std::to_string(tmax);
    const json& r = *find(tr, {"series", "retention-chunkwise", t});
    const json& a = *find(tr, {"series", "attention-tiled", t});
    add("training tokens/s at " + kstr(tmax) + ", chunkwise vs tiled attention",
        r["tokens_per_s"]["median"], a["tokens_per_s"]["median"], false, "tokens/s",
        "1.15x vs FlashAttention, 6.8x vs plain (1.3B, 8 A100, 8k)");
    add("training peak RSS at " + kstr(tmax) + ", chunkwise vs tiled attention",
        r["peak_rss_bytes"], a["peak_rss_bytes"], true, "bytes",
        "1.12x less vs FlashAttention, 2.2x vs plain (1.3B, 8 A100, 8k)");
  }
  return out;
}

void print_ratios(const json& rs) {
  std::printf("\nheadline ratios (RetNet's advantage over the transformer, this run)\n");
  std::printf("%-58s %12s %12s %10s  %s\n", "claim", "RetNet", "transformer", "advantage",
              "paper");
  for (const auto& r : rs) {
    const std::string unit = r["unit"];
    auto fmtv = [&](double v) {
      return unit == "bytes"      ? human_bytes(v)
             : unit == "ms/step"  ? fmt::format("{:.3f} ms", v)
                                  : fmt::format("{:.0f}/s", v);
    };
    std::printf("%-58s %12s %12s %9.2fx  %s\n", r["claim"].get<std::string>().c_str(),
                fmtv(r["retnet"]).c_str(), fmtv(r["transformer"]).c_str(),
                r["retnet_advantage"].get<double>(), r["paper"].get<std::string>().c_str());
  }
}

// The plotting script, found without the source tree: $RETNET_PLOT_SCRIPT, else
// share/retnet/plot_paper.py beside the executable (the build tree) or one level up (an install
// prefix: bin/retnet, share/retnet/plot_paper.py). Empty when none exists.
std::string plot_script() {
  if (const char* env = std::getenv("RETNET_PLOT_SCRIPT")) return fs::exists(env) ? env : "";
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return "";
  for (const fs::path& p : {exe_dir / "share/retnet/plot_paper.py",
                            exe_dir.parent_path() / "share/retnet/plot_paper.py"})
    if (fs::exists(p)) return p.string();
  return "";
}

void plot(const std::string& dir) {
  const std::string script = plot_script();
  if (script.empty()) {
    std::printf("\nplots: plot_paper.py not found beside the executable (share/retnet/, as "
                "`cmake --install` lays it out) nor in $RETNET_PLOT_SCRIPT; no plots made\n");
    return;
  }
  const std::string how = "/usr/bin/python3 " + script + " " + dir + "/results.json";
  if (!fs::exists("/usr/bin/python3") || !fs::exists(script) ||
      spawn_capture({"/usr/bin/python3", "-c", "import matplotlib"}, true).first != 0) {
    std::printf("\nplots: needs /usr/bin/python3 with matplotlib (apt-get install "
                "python3-matplotlib), then: %s\n",
                how.c_str());
    return;
  }
  auto [rc, out] = spawn_capture({"/usr/bin/python3", script, dir + "/results.json"}, false);
  std::printf("\n%s", out.c_str());
  if (rc != 0) std::printf("plots: the script failed (status %d); run: %s\n", rc, how.c_str());
}

void run_bench_paper(const PaperOptions& o) {
  const auto t_start = Clock::now();
  apply_threads(o.threads);
  const Plan p = make_plan(o);
  const int threads = num_threads();
  const double mem_cap = o.mem_cap_gib > 0 ? o.mem_cap_gib * double(1 << 30)
                                           : 0.6 * double(meminfo_bytes("MemAvailable"));
  fs::create_directories(o.out);
  Model ret = Model::init(family_config(kRet), 1), att = Model::init(family_config(kAtt), 1);
  ret.prepare_decode(DecodePrecision::F32);
  att.prepare_decode(DecodePrecision::F32);
  json res = {{"benchmark", "retnet bench paper"},
              {"mode", p.mode},
              {"machine", machine_json()},
              {"git_commit", git_commit()},
              {"threads", threads},
              {"memory_cap_bytes", mem_cap},
              {"configs",
               {{"retnet",
                 {{"config", json::parse(ret.config().to_json())},
                  {"parameters", ret.parameter_count()}}},
                {"transformer",
                 {{"config", json::parse(att.config().to_json())},
                  {"parameters", att.parameter_count()}}}}}};
  std::printf("retnet bench paper (%s): RetNet %lld parameters, transformer %lld (FFN %lld)\n",
              p.mode.c_str(), (long long)ret.parameter_count(), (long long)att.parameter_count(),
              (long long)att.config().ffn_dim);
  std::printf("machine: %s, %ld cores, %s; %d threads; commit %s\n", cpu_model().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), human_bytes(double(meminfo_bytes("MemTotal"))).c_str(),
              threads, res["git_commit"].get<std::string>().c_str());
  json& figs = res["figures"];
  figs["inference_memory"] = figure_memory(p, threads);
  figs["decode"] = figure_decode(p, ret, att, mem_cap);
  figs["training"] = figure_training(p, threads, mem_cap);
  figs["heads_sweep"] = figure_heads(p);
  res["ratios"] = ratios(figs, p);
  res["wall_s"] = since(t_start);
  print_ratios(res["ratios"]);
  const std::string path = (fs::path(o.out) / "results.json").string();
  write_json(path, res);
  std::printf("\nwrote %s (%.0f s)\n", path.c_str(), since(t_start));
  if (!o.no_plot) plot(o.out);
}

}  // namespace

void register_bench_paper(CLI::App* bench) {
  auto [o, cmd] = add_bench_subcommand<PaperOptions>(
      bench, "paper",
      "The RetNet paper's headline claims against a softmax transformer of the same size: "
      "inference memory by length, decode latency and throughput by batch, training speed and "
      "memory by length, the heads sweep; results.json and plots in --out");
  cmd->add_option("--out", o->out, "Output directory")->capture_default_str();
  cmd->add_flag("--quick", o->quick, "Fewer points and repetitions (a smoke test, < 3 minutes)");
  cmd->add_flag("--smoke", o->smoke, "")->group("");  // the test suite's: fewer still
  add_checked(cmd, "--reps", o->reps, "Repetitions per point (median reported)",
              integer_within(5, 1000));
  add_threads_option(cmd, o->threads);
  cmd->add_option("--train-cap", o->train_cap_s,
                  "Skip training points whose step takes longer, seconds (default: 30; --quick 10)")
      ->check(number_at_least(0));
  cmd->add_option("--mem-cap", o->mem_cap_gib,
                  "Skip points estimated above this many GiB (default: 60% of available memory)")
      ->check(number_at_least(0));
  cmd->add_flag("--no-plot", o->no_plot,
                "Do not plot (plots need /usr/bin/python3 with python3-matplotlib and plot_paper.py, found in share/retnet/ beside the executable or one level up, or $RETNET_PLOT_SCRIPT)");
  cmd->callback([o = o] { run_bench_paper(*o); });

  // One measurement in a fresh process, one JSON line on stdout (see run_probe).
  struct ProbeOptions {
    std::string what, mixer = "retention", form = "parallel";
    int64_t length = 1024;
    int reps = 5, threads = 0;
    double cap = 1e9;
  };
  auto q = std::make_shared<ProbeOptions>();
  auto* probe = bench->add_subcommand("paper-probe", "")->group("");
  probe->add_option("--what", q->what)->required()->check(CLI::IsMember({"memory", "train"}));
  probe->add_option("--mixer", q->mixer);
  probe->add_option("--form", q->form);
  probe->add_option("--length", q->length)->check(integer_at_least(1));
  probe->add_option("--reps", q->reps)->check(integer_at_least(1));
  probe->add_option("--threads", q->threads)->check(integer_within(0, 4096));
  probe->add_option("--cap", q->cap)->check(number_above(0));
  probe->callback([q] {
    apply_threads(q->threads);
    const MixerSpec* kind = &find_mixer(q->mixer);
    const json r = q->what == "memory"
                       ? probe_memory(kind, q->length, 16)
                       : probe_train(kind, parse_form(q->form), q->length, q->reps,
                                     q->cap);
    std::printf("%s\n", r.dump().c_str());
  });
}

}  // namespace retnet::cli
