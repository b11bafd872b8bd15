// The retention heads sweep: one retention layer, T = 2048 tokens, 512 channels in total split
// over 1 .. 256 heads, in each form. Forward time per call.
#include <benchmark/benchmark.h>

#include <vector>

#include "retnet/core/rng.h"
#include "retnet/mixers/retention.h"

using namespace retnet;

namespace {

// Args: form (0 parallel, 1 chunkwise 64, 2 chunkwise 128, 3 recurrent, 4 scan), heads.
void BM_Retention(benchmark::State& st) {
  const int64_t T = 2048, channels = 512, H = st.range(1);
  const int64_t Dk = channels / H, Dv = channels / H;
  static const Form forms[] = {Form::Parallel, Form::Chunkwise,
                                        Form::Chunkwise, Form::Recurrent,
                                        Form::Scan};
  const Form form = forms[st.range(0)];
  Philox rng(7);
  std::vector<float> q(T * channels), k(T * channels), v(T * channels), out(T * channels);
  for (int64_t i = 0; i < T * channels; ++i) {
    q[i] = static_cast<float>(rng.normal(0, i));
    k[i] = static_cast<float>(rng.normal(1, i) / 8);
    v[i] = static_cast<float>(rng.normal(2, i));
  }
  std::vector<double> gammas(H);
  for (int64_t h = 0; h < H; ++h) gammas[h] = 1.0 - std::exp2(-5.0 - h % 8);
  std::vector<float> state(H * retention_state_floats_per_head(Dk, Dv));
  auto view = [&](std::vector<float>& x, int64_t last) {
    TensorView t;
    t.data = x.data();
    t.ndim = 4;
    t.shape = {1, T, H, last};
    t.stride = {T * channels, channels, last, 1};
    return t;
  };
  RetentionArgs a;
  a.q = view(q, Dk);
  a.k = view(k, Dk);
  a.v = view(v, Dv);
  a.out = view(out, Dv);
  a.gammas = gammas.data();
  a.state = state.data();
  a.chunk = st.range(0) == 2 ? 128 : 64;
  Arena arena(retention_workspace_floats(form, 1, T, H, Dk, Dv, a.chunk, 0));
  for (auto _ : st) {
    std::fill(state.begin(), state.end(), 0.f);
    arena.reset();
    retention_forward(form, a, arena);
    benchmark::ClobberMemory();
  }
  static const char* names[] = {"parallel", "chunkwise64", "chunkwise128", "recurrent", "scan"};
  st.SetLabel(names[st.range(0)]);
  st.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["workspace_MiB"] = static_cast<double>(arena.high_water() * 4) / (1 << 20);
}

void HeadSweep(benchmark::internal::Benchmark* b) {
  for (int form = 0; form < 5; ++form)
    for (int64_t h = 1; h <= 256; h *= 2) b->Args({form, h});
}

}  // namespace

BENCHMARK(BM_Retention)->ArgNames({"form", "heads"})->Apply(HeadSweep)->UseRealTime()
    ->Unit(benchmark::kMillisecond)->MinTime(0.2);

BENCHMARK_MAIN();
