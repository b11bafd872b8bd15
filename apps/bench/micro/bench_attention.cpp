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

#include "micro_common.h"
#include "mixer_sweeps.h"
#include "retnet/core/parallel.h"
#include "retnet/mixers/attention.h"
#include "retnet/mixers/retention.h"

using namespace retnet;
using bench::random_floats;

namespace {

constexpr int64_t kH = 4, kD = 64;

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
  bench::AttentionViews attention_views() {
    return {view(q), view(k), view(v), view(out), view(d_out), view(d_q), view(d_k), view(d_v)};
  }
};

enum Kind { kAttention, kAttentionTrain, kRetParallel, kRetChunkwise, kRetChunkwiseTrain };
const char* kKindNames[] = {"attention fwd", "attention fwd+bwd", "retention parallel fwd",
                            "retention chunkwise64 fwd", "retention chunkwise64 fwd+bwd"};

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
  const bool attention = kind == kAttention || kind == kAttentionTrain;
  Arena arena(attention ? bench::attention_train_workspace_floats(T, kH, kD)
                        : std::max(retention_workspace_floats(form, 1, T, kH, kD, kD, 64, 0),
                                   retention_backward_workspace_floats(form, T, kD, kD, 64)));
  bench::time_with_arena(st, arena, [&] {
    if (attention)
      bench::run_attention(o.attention_views(), kind == kAttentionTrain, arena, lse.data());
    else
      run_retention(o, form, kind == kRetChunkwiseTrain, arena, state, stats, gammas);
  });
  bench::report_throughput(st, kKindNames[kind], T, arena);
}

// Args: mixer (0 attention, 1 retention recurrent), cached tokens.
void BM_Decode(benchmark::State& st) {
  set_num_threads(0);
  const bool attention = st.range(0) == 0;
  const int64_t cached = st.range(1);
  Operands one(1);
  bench::DecodeCache filled;
  AttentionCache cache;
  cache.length = filled.length.data();
  std::vector<double> gammas(kH, 0.97);
  std::vector<float> state(kH * retention_state_floats_per_head(kD, kD), 0.f);
  if (attention) {
    attention_cache_reserve(cache, filled.storage, 1, kH, kD, kD, cached + 1);
    filled.fill(attention_cache_floats(kH, kD, kD, cached), 4, 0.5, cached);
  }
  Arena arena(attention_step_workspace_floats(1, kH, kD) + 4096);
  bench::time_with_arena(st, arena, [&] {
    if (attention) {
      attention_step(one.view(one.q), one.view(one.k), one.view(one.v), one.view(one.out), cache,
                     arena);
      filled.length[0] = cached;  // the next step sees the same cache length
    } else {
      RetentionArgs a;
      a.q = one.view(one.q), a.k = one.view(one.k), a.v = one.view(one.v);
      a.out = one.view(one.out);
      a.gammas = gammas.data();
      a.state = state.data();
      retention_forward(Form::Recurrent, a, arena);
    }
  });
  st.SetLabel(attention ? "attention step" : "retention recurrent step");
  st.counters["cache_MiB"] =
      bench::mebibytes(attention ? attention_cache_floats(kH, kD, kD, cached) : state.size());
}

}  // namespace

BENCHMARK(BM_Mixer)->Apply([](auto* b) { bench::mixer_sweep(b, 5, {256, 1024, 2048, 4096}); });
BENCHMARK(BM_Decode)->Apply([](auto* b) { bench::decode_sweep(b, {128, 1024, 8192, 16384}); });

BENCHMARK_MAIN();
