// AFT-full against softmax attention at the same width in the same run: one layer's mixer, B = 1,
// C = 512 channels for AFT, H = 8 heads of Dk = Dv = 64 for attention, T = 512 .. 4096.
//   BM_Mixer: forward, and forward + backward (L = 1024 position biases).
//   BM_Decode: one decode step after `cache` tokens; both caches grow with the sequence.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for medians.
#include <benchmark/benchmark.h>

#include <vector>

#include "micro_common.h"
#include "mixer_sweeps.h"
#include "retnet/core/parallel.h"
#include "retnet/mixers/aft.h"
#include "retnet/mixers/attention.h"

using namespace retnet;
using bench::random_floats;

namespace {

constexpr int64_t kC = 512, kH = 8, kD = 64, kL = 1024;

// Operands of both mixers: AFT views them as [1, T, C], attention as [1, T, H, D].
struct Operands {
  int64_t T;
  std::vector<float> q, k, v, out, d_out, d_q, d_k, d_v, bias, d_bias;
  explicit Operands(int64_t t) : T(t) {
    const int64_t n = T * kC;
    q = random_floats(n, 0, 1.0), k = random_floats(n, 1, 1.0), v = random_floats(n, 2, 1.0);
    d_out = random_floats(n, 3, 1.0), bias = random_floats(kL, 4, 1.0);
    out.assign(n, 0.f), d_q.assign(n, 0.f), d_k.assign(n, 0.f), d_v.assign(n, 0.f);
    d_bias.assign(kL, 0.f);
  }
  TensorView channels(std::vector<float>& x) {
    return TensorView::contiguous(x.data(), {1, T, kC});
  }
  TensorView heads(std::vector<float>& x) {
    return TensorView::contiguous(x.data(), {1, T, kH, kD});
  }
  bench::AttentionViews attention_views() {
    return {heads(q), heads(k), heads(v), heads(out), heads(d_out), heads(d_q), heads(d_k),
            heads(d_v)};
  }
};

enum Kind { kAft, kAftTrain, kAttention, kAttentionTrain };
const char* kKindNames[] = {"aft fwd", "aft fwd+bwd", "attention fwd", "attention fwd+bwd"};

void run_aft(Operands& o, bool train, Arena& arena, std::vector<float>& saved) {
  const int64_t n = o.T * kC;
  AftArgs a;
  a.q = o.channels(o.q), a.k = o.channels(o.k), a.v = o.channels(o.v);
  a.out = o.channels(o.out);
  a.bias = o.bias.data(), a.L = kL;
  a.row_max = saved.data(), a.denominator = saved.data() + n, a.ratio = saved.data() + 2 * n;
  aft_forward(a, arena);
  if (!train) return;
  AftGradArgs g;
  g.q = a.q, g.k = a.k, g.v = a.v, g.d_out = o.channels(o.d_out);
  g.d_q = o.channels(o.d_q), g.d_k = o.channels(o.d_k), g.d_v = o.channels(o.d_v);
  g.bias = o.bias.data(), g.d_bias = o.d_bias.data(), g.L = kL;
  g.row_max = a.row_max, g.denominator = a.denominator, g.ratio = a.ratio;
  arena.reset();
  aft_backward(g, arena);
}

// Args: kind, T.
void BM_Mixer(benchmark::State& st) {
  set_num_threads(0);
  const auto kind = static_cast<Kind>(st.range(0));
  const int64_t T = st.range(1);
  Operands o(T);
  std::vector<float> saved(aft_saved_floats(1, T, kC)), lse(T * kH);
  const bool aft = kind == kAft || kind == kAftTrain;
  const size_t floats =
      aft ? std::max(aft_workspace_floats(kAftDefaultTile),
                     aft_backward_workspace_floats(kL, kAftDefaultTile))
          : bench::attention_train_workspace_floats(T, kH, kD);
  Arena arena(floats);
  bench::time_with_arena(st, arena, [&] {
    if (aft)
      run_aft(o, kind == kAftTrain, arena, saved);
    else
      bench::run_attention(o.attention_views(), kind == kAttentionTrain, arena, lse.data());
  });
  bench::report_throughput(st, kKindNames[kind], T, arena);
}

// Args: mixer (0 AFT, 1 attention), cached tokens. Both caches hold 2 * 512 floats per token.
void BM_Decode(benchmark::State& st) {
  set_num_threads(0);
  const bool aft = st.range(0) == 0;
  const int64_t cached = st.range(1);
  Operands one(1);
  bench::DecodeCache filled;
  AftCache aft_cache;
  AttentionCache attention_cache;
  aft_cache.length = attention_cache.length = filled.length.data();
  if (aft)
    aft_cache_reserve(aft_cache, filled.storage, 1, kC, cached + 1);
  else
    attention_cache_reserve(attention_cache, filled.storage, 1, kH, kD, kD, cached + 1);
  filled.fill(aft_cache_floats(kC, cached), 5, 1.0, cached);
  Arena arena(aft_step_workspace_floats(1, kC) + attention_step_workspace_floats(1, kH, kD));
  bench::time_with_arena(st, arena, [&] {
    if (aft)
      aft_step(one.channels(one.q), one.channels(one.k), one.channels(one.v), one.channels(one.out),
               aft_cache, one.bias.data(), kL, arena);
    else
      attention_step(one.heads(one.q), one.heads(one.k), one.heads(one.v), one.heads(one.out),
                     attention_cache, arena);
    filled.length[0] = cached;  // the next step sees the same cache length
  });
  st.SetLabel(aft ? "aft step" : "attention step");
  st.counters["cache_MiB"] = bench::mebibytes(aft_cache_floats(kC, cached));
}

}  // namespace

BENCHMARK(BM_Mixer)->Apply([](auto* b) { bench::mixer_sweep(b, 4, {512, 2048, 4096}); });
BENCHMARK(BM_Decode)->Apply([](auto* b) { bench::decode_sweep(b, {1024, 8192}); });

BENCHMARK_MAIN();
