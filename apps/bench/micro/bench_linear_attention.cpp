// Forward time of the linear-transformer and Performer mixers (feature map included) in each form,
// with retention's chunkwise form at the same shapes in the same run as the baseline for ratios.
// One sequence, H = 4 heads, Dk = Dv = 64, T = 256, 2048, 8192; chunk 64.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "micro_common.h"
#include "retnet/core/rng.h"
#include "retnet/mixers/linear_attention.h"
#include "retnet/mixers/retention.h"

using namespace retnet;

namespace {

constexpr int64_t kH = 4, kDk = 64, kDv = 64, kChunk = 64;

// q, k, v of one sequence, [1, T, H, 64] each, and a view helper.
struct Inputs {
  int64_t T;
  std::vector<float> q, k, v, out;
  explicit Inputs(int64_t t) : T(t), q(T * kH * kDk), k(q.size()), v(T * kH * kDv), out(v.size()) {
    Philox rng(7);
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = static_cast<float>(rng.normal(0, i));
      k[i] = static_cast<float>(rng.normal(1, i) / 8);
      v[i] = static_cast<float>(rng.normal(2, i));
    }
  }
  TensorView view(std::vector<float>& x, int64_t D) {
    return TensorView::contiguous(x.data(), {1, T, kH, D});
  }
  // Points a mixer's q, k, v and out at these inputs.
  template <typename Args>
  void set_views(Args& a) {
    a.q = view(q, kDk);
    a.k = view(k, kDk);
    a.v = view(v, kDv);
    a.out = view(out, kDv);
  }
};

// Args: mixer (0 linear elu+1, 1 Performer m = 64, 2 Performer m = 256), form (0 parallel,
// 1 recurrent, 2 chunkwise), T.
void BM_LinearAttention(benchmark::State& st) {
  const int64_t mixer = st.range(0), T = st.range(2);
  const Form form = static_cast<Form>(st.range(1));
  Inputs in(T);
  const int64_t m = mixer == 1 ? 64 : 256;
  std::vector<float> w = mixer == 0 ? std::vector<float>{} : favor_random_matrix(3, m, kDk);
  const FeatureMap map = mixer == 0 ? elu_feature_map() : favor_feature_map(w.data(), m, kDk);
  const int64_t F = map.features(kDk);
  std::vector<float> state(kH * linear_attention_state_floats_per_head(F, kDv));
  LinearAttentionArgs a;
  in.set_views(a);
  a.features = map;
  a.state = state.data();
  a.state_stride = static_cast<int64_t>(state.size());
  a.chunk = kChunk;
  Arena arena(linear_attention_workspace_floats(form, map, 1, T, kH, kDk, kDv, kChunk));
  for (auto _ : st) {
    std::fill(state.begin(), state.end(), 0.f);
    arena.reset();
    linear_attention_forward(form, a, arena);
    benchmark::ClobberMemory();
  }
  static const char* mixers[] = {"linear", "performer64", "performer256"};
  bench::report_throughput(st, std::string(mixers[mixer]) + "/" + form_name(form), T, arena);
}

// Args: form (0 parallel, 1 recurrent, 2 chunkwise), T. The baseline: retention at the same shapes.
void BM_Retention(benchmark::State& st) {
  static const Form forms[] = {Form::Parallel, Form::Recurrent,
                                        Form::Chunkwise};
  const Form form = forms[st.range(0)];
  const int64_t T = st.range(1);
  Inputs in(T);
  std::vector<double> gammas(kH);
  for (int64_t h = 0; h < kH; ++h) gammas[h] = 1.0 - std::exp2(-5.0 - h);
  std::vector<float> state(kH * retention_state_floats_per_head(kDk, kDv));
  RetentionArgs a;
  in.set_views(a);
  a.gammas = gammas.data();
  a.state = state.data();
  a.chunk = kChunk;
  Arena arena(retention_workspace_floats(form, 1, T, kH, kDk, kDv, kChunk, 0));
  for (auto _ : st) {
    std::fill(state.begin(), state.end(), 0.f);
    arena.reset();
    retention_forward(form, a, arena);
    benchmark::ClobberMemory();
  }
  bench::report_throughput(st, std::string("retention/") + form_name(form), T, arena);
}

void LinearSweep(benchmark::internal::Benchmark* b) {
  for (int64_t T : {256, 2048, 8192})
    for (int mixer = 0; mixer < 3; ++mixer)
      for (int form = 0; form < 3; ++form) b->Args({mixer, form, T});
}

void RetentionSweep(benchmark::internal::Benchmark* b) {
  for (int64_t T : {256, 2048, 8192})
    for (int form = 0; form < 3; ++form) b->Args({form, T});
}

}  // namespace

BENCHMARK(BM_Retention)->ArgNames({"form", "T"})->Apply(RetentionSweep)->UseRealTime()
    ->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_LinearAttention)->ArgNames({"mixer", "form", "T"})->Apply(LinearSweep)
    ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

BENCHMARK_MAIN();
