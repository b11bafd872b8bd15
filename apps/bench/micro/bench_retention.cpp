// The retention heads sweep: one retention layer, T = 2048 tokens, 512 channels in total split
// over 1 .. 256 heads, in each form. Forward time per call.
#include <benchmark/benchmark.h>

#include <vector>

#include "../retention_bench_setup.h"
#include "micro_common.h"

using namespace retnet;

namespace {

// Args: form (0 parallel, 1 chunkwise 64, 2 chunkwise 128, 3 recurrent, 4 scan), heads.
void BM_Retention(benchmark::State& st) {
  static const Form forms[] = {Form::Parallel, Form::Chunkwise, Form::Chunkwise, Form::Recurrent,
                               Form::Scan};
  const Form form = forms[st.range(0)];
  RetentionBenchSetup setup(st.range(1), st.range(0) == 2 ? 128 : 64);
  Arena arena(setup.workspace_floats(form));
  for (auto _ : st) {
    std::fill(setup.state.begin(), setup.state.end(), 0.f);
    arena.reset();
    retention_forward(form, setup.args, arena);
    benchmark::ClobberMemory();
  }
  static const char* names[] = {"parallel", "chunkwise64", "chunkwise128", "recurrent", "scan"};
  bench::report_throughput(st, names[st.range(0)], setup.T, arena);
}

void HeadSweep(benchmark::internal::Benchmark* b) {
  for (int form = 0; form < 5; ++form)
    for (int64_t h = 1; h <= 256; h *= 2) b->Args({form, h});
}

}  // namespace

BENCHMARK(BM_Retention)->ArgNames({"form", "heads"})->Apply(HeadSweep)->UseRealTime()
    ->Unit(benchmark::kMillisecond)->MinTime(0.2);

BENCHMARK_MAIN();
