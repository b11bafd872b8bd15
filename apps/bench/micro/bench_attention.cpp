// Softmax attention, the baseline, against retention at the same shapes in the same run: one
// layer's mixer, B = 1, H = 4, Dk = Dv = 64, T = 256 .. 4096.
//   BM_Mixer: forward, and forward + backward, of the tiled attention kernels; retention's parallel
//             and chunkwise (64) forward, and its chunkwise forward + backward.
//   BM_Decode: one decode step after `cache` tokens; attention's cost grows with the cache,
//              retention's recurrent step does not.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for medians.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "mixer_sweeps.h"
#include "retnet/core/parallel.h"
#include "retnet/core/rng.h"
#include "retnet/mixers/attention.h"
#include "retnet/mixers/retention.h"

using namespace retnet;

namespace {

constexpr int64_t kH = 4, kD = 64;

std::vector<float> random_floats(int64_t n, uint64_t stream, double scale) {
  Philox rng(7);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(scale * rng.normal(stream, i));
  return x;
}

struct Operands {
  int64_t T;
  std::vector<float> q, k, v, out, d_out, d_q, d_k, d_v;
  explicit Operands(int64_t t) : T(t) {
    const int64_t n = T * kH * kD;
    q = random_floats(n, 0, 1.0), k = random_floats(n, 1, 1.0 / 8), v = random_floats(n, 2, 1.0);
    d_out = random_floats(n, 3, 1.0);
    out.assign(n, 0.f), d_q.assign(n, 0.f), d_k.assign(n, 0.f), d_v.assign(n, 0.f);
  }
  TensorView view(std::vector<float>& x) {
    return TensorView::contiguous(x.data(), {1, T, kH, kD});
  }
};

enum Kind { kAttention, kAttentionTrain, kRetParallel, kRetChunkwise, kRetChunkwiseTrain };
const char* kKindNames[] = {"attention fwd", "attention fwd+bwd", "retention parallel fwd",
                            "retention chunkwise64 fwd", "retention chunkwise64 fwd+bwd"};

void run_attention(Operands& o, bool train, Arena& arena, std::vector<float>& lse) {
  AttentionArgs a;
  a.q = o.view(o.q), a.k = o.view(o.k), a.v = o.view(o.v), a.out = o.view(o.out);
  a.logsumexp = lse.data();
  attention_forward(a, arena);
  if (!train) return;
  AttentionGradArgs g;
  g.q = a.q, g.k = a.k, g.v = a.v, g.out = a.out, g.d_out = o.view(o.d_out);
  g.d_q = o.view(o.d_q), g.d_k = o.view(o.d_k), g.d_v = o.view(o.d_v);
  g.logsumexp = lse.data();
  arena.reset();
  attention_backward(g, arena);
}

void run_retention(Operands& o, Form form, bool train, Arena& arena,
                   std::vector<float>& state, std::vector<float>& stats,
                   const std::vector<double>& gammas) {
  std::fill(state.begin(), state.end(), 0.f);
  RetentionArgs a;
  a.q = o.view(o.q), a.k = o.view(o.k), a.v = o.view(o.v), a.out = o.view(o.out);
  a.gammas = gammas.data();
  a.state = state.data();
  a.row_stats = stats.data();
  retention_forward(form, a, arena);
  if (!train) return;
  RetentionGradArgs g;
  g.q = a.q, g.k = a.k, g.v = a.v, g.out = a.out, g.d_out = o.view(o.d_out);
  g.d_q = o.view(o.d_q), g.d_k = o.view(o.d_k), g.d_v = o.view(o.d_v);
  g.row_stats = stats.data();
  g.gammas = gammas.data();
  arena.reset();
  retention_backward(form, g, arena);
}

// Args: kind, T.
void BM_Mixer(benchmark::State& st) {
  set_num_threads(0);
  const auto kind = static_cast<Kind>(st.range(0));
  const int64_t T = st.range(1);
  Operands o(T);
  std::vector<double> gammas(kH);
  for (int64_t h = 0; h < kH; ++h) gammas[h] = 1.0 - std::exp2(-5.0 - h);
  std::vector<float> state(kH * retention_state_floats_per_head(kD, kD)), stats(T * kH * 2),
      lse(T * kH);
  const Form form =
      kind == kRetParallel ? Form::Parallel : Form::Chunkwise;
  size_t floats = 0;
  if (kind == kAttention || kind == kAttentionTrain)
    floats = std::max(attention_workspace_floats(T, kD, kD, kAttentionDefaultTile),
                      attention_backward_workspace_floats(1, T, kH, kD, kD, kAttentionDefaultTile));
  else
    floats = std::max(retention_workspace_floats(form, 1, T, kH, kD, kD, 64, 0),
                      retention_backward_workspace_floats(form, T, kD, kD, 64));
  Arena arena(floats);
  for (auto _ : st) {
    arena.reset();
    if (kind == kAttention || kind == kAttentionTrain)
      run_attention(o, kind == kAttentionTrain, arena, lse);
    else
      run_retention(o, form, kind == kRetChunkwiseTrain, arena, state, stats, gammas);
    benchmark::ClobberMemory();
  }
  st.SetLabel(kKindNames[kind]);
  st.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["workspace_MiB"] = static_cast<double>(arena.high_water() * 4) / (1 << 20);
}

// Args: mixer (0 attention, 1 retention recurrent), cached tokens.
void BM_Decode(benchmark::State& st) {
  set_num_threads(0);
  const bool attention = st.range(0) == 0;
  const int64_t cached = st.range(1);
  Operands one(1);
  std::vector<float> cache_storage;
  std::vector<int64_t> length{0};
  AttentionCache cache;
  cache.length = length.data();
  std::vector<double> gammas(kH, 0.97);
  std::vector<float> state(kH * retention_state_floats_per_head(kD, kD), 0.f);
  if (attention) {
    // Fill the cache with random rows; their values do not change the cost.
    attention_cache_reserve(cache, cache_storage, 1, kH, kD, kD, cached + 1);
    auto fill = random_floats(attention_cache_floats(kH, kD, kD, cached), 4, 0.5);
    std::copy(fill.begin(), fill.end(), cache_storage.begin());
    length[0] = cached;
  }
  Arena arena(attention_step_workspace_floats(1, kH, kD) + 4096);
  for (auto _ : st) {
    arena.reset();
    if (attention) {
      attention_step(one.view(one.q), one.view(one.k), one.view(one.v), one.view(one.out), cache,
                     arena);
      length[0] = cached;  // the next step sees the same cache length
    } else {
      RetentionArgs a;
      a.q = one.view(one.q), a.k = one.view(one.k), a.v = one.view(one.v);
      a.out = one.view(one.out);
      a.gammas = gammas.data();
      a.state = state.data();
      retention_forward(Form::Recurrent, a, arena);
    }
    benchmark::ClobberMemory();
  }
  st.SetLabel(attention ? "attention step" : "retention recurrent step");
  st.counters["cache_MiB"] =
      attention ? static_cast<double>(attention_cache_floats(kH, kD, kD, cached) * 4) / (1 << 20)
                : static_cast<double>(state.size() * 4) / (1 << 20);
}

}  // namespace

BENCHMARK(BM_Mixer)->Apply([](auto* b) { bench::mixer_sweep(b, 5, {256, 1024, 2048, 4096}); });
BENCHMARK(BM_Decode)->Apply([](auto* b) { bench::decode_sweep(b, {128, 1024, 8192, 16384}); });

BENCHMARK_MAIN();
