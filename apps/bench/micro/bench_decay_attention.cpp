// Forward and backward time of channel-wise decay attention (RWKV-4 WKV / AFT-simple) in each form,
// one sequence, C = 512 channels, T = 256 and 2048. The recurrent forward is the baseline: it is
// O(T C), the pairwise forms O(T^2 C) (parallel) and O(T chunk C) (chunkwise).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "micro_common.h"
#include "retnet/core/rng.h"
#include "retnet/mixers/decay_attention.h"

using namespace retnet;

namespace {

constexpr int64_t kC = 512;

// r, k, v of one sequence, [1, T, C] each; w, u [C].
struct Inputs {
  int64_t T;
  std::vector<float> r, k, v, out, wkv, log_den, w, u;
  explicit Inputs(int64_t t)
      : T(t),
        r(T * kC),
        k(r.size()),
        v(r.size()),
        out(r.size()),
        wkv(r.size()),
        log_den(r.size()),
        w(kC),
        u(kC) {
    Philox rng(7);
    for (size_t i = 0; i < r.size(); ++i) {
      r[i] = static_cast<float>(rng.normal(0, i));
      k[i] = static_cast<float>(rng.normal(1, i));
      v[i] = static_cast<float>(rng.normal(2, i));
    }
    for (int64_t c = 0; c < kC; ++c) {
      w[c] = static_cast<float>(std::exp(rng.normal(3, c) - 2));
      u[c] = static_cast<float>(rng.normal(4, c));
    }
  }
  TensorView view(std::vector<float>& x) { return TensorView::contiguous(x.data(), {1, T, kC}); }
  // save: keep wkv and the log denominators for a backward (training), or not (inference).
  DecayAttentionArgs args(std::vector<float>& state, int64_t chunk, bool save) {
    DecayAttentionArgs a;
    a.r = view(r), a.k = view(k), a.v = view(v), a.out = view(out);
    a.w = w.data(), a.u = u.data();
    a.state = state.data(), a.state_stride = kC * 3;
    a.chunk = chunk;
    if (save) a.saved_wkv = wkv.data(), a.saved_log_denominators = log_den.data();
    return a;
  }
};

// Args: form (0 parallel, 1 recurrent, 2 chunkwise), T, chunk.
void BM_DecayAttention(benchmark::State& st) {
  const auto form = static_cast<Form>(st.range(0));
  const int64_t T = st.range(1), chunk = st.range(2);
  Inputs in(T);
  std::vector<float> state(3 * kC);
  const DecayAttentionArgs a = in.args(state, chunk, false);
  Arena arena(decay_attention_workspace_floats(form, 1, T, kC, chunk));
  for (auto _ : st) {
    std::fill(state.begin(), state.end(), 0.f);
    arena.reset();
    decay_attention_forward(form, a, arena);
    benchmark::ClobberMemory();
  }
  bench::report_throughput(st, std::string(form_name(form)) + "/forward (inference)", T, arena);
}

// Args: form (0 parallel, 2 chunkwise), T, chunk.
void BM_DecayAttentionBackward(benchmark::State& st) {
  const auto form = static_cast<Form>(st.range(0));
  const int64_t T = st.range(1), chunk = st.range(2);
  Inputs in(T);
  std::vector<float> state(3 * kC), d_out(in.r.size(), 1.f), dr(in.r.size()), dk(dr), dv(dr),
      dw(kC), du(kC);
  const DecayAttentionArgs a = in.args(state, chunk, true);
  Arena arena(std::max(decay_attention_workspace_floats(form, 1, T, kC, chunk),
                       decay_attention_backward_workspace_floats(form, 1, T, kC, chunk)));
  decay_attention_forward(form, a, arena);
  DecayAttentionGradArgs g;
  g.r = a.r, g.k = a.k, g.v = a.v, g.d_out = in.view(d_out);
  g.d_r = in.view(dr), g.d_k = in.view(dk), g.d_v = in.view(dv);
  g.w = in.w.data(), g.u = in.u.data(), g.d_w = dw.data(), g.d_u = du.data();
  g.wkv = in.wkv.data(), g.log_denominators = in.log_den.data();
  g.chunk = chunk;
  for (auto _ : st) {
    arena.reset();
    decay_attention_backward(form, g, arena);
    benchmark::ClobberMemory();
  }
  bench::report_throughput(st, std::string(form_name(form)) + "/backward", T, arena);
}

void forward_args(benchmark::internal::Benchmark* b) {
  for (int64_t T : {256, 2048}) {
    b->Args({1, T, 64});  // recurrent: the baseline
    b->Args({0, T, T});
    for (int64_t chunk : {16, 64}) b->Args({2, T, chunk});
  }
}

void backward_args(benchmark::internal::Benchmark* b) {
  for (int64_t T : {256, 2048}) {
    b->Args({0, T, T});
    for (int64_t chunk : {16, 64}) b->Args({2, T, chunk});
  }
}

}  // namespace

BENCHMARK(BM_DecayAttention)->Apply(forward_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecayAttentionBackward)
    ->Apply(backward_args)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
