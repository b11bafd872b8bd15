// Whole-model forward throughput in each form at T = 2048, for the benchmark config of the issues
// (d 256, value 512, 4 heads, FFN 512, swish, 4 layers, vocab 256), batch 1.
#include <benchmark/benchmark.h>

#include <utility>
#include <vector>

#include "micro_common.h"
#include "retnet/model/forward.h"

using namespace retnet;

namespace {

// Args: form (0 parallel, 1 chunkwise, 2 scan, 3 recurrent), T, chunk.
void BM_ModelForward(benchmark::State& st) {
  const Model& model = bench::issue_benchmark_model();
  const int64_t T = st.range(1);
  static const Form forms[] = {Form::Parallel, Form::Chunkwise,
                                        Form::Scan, Form::Recurrent};
  ForwardOptions fo;
  fo.form = forms[st.range(0)];
  fo.chunk = st.range(2);
  std::vector<int32_t> tokens(T);
  for (int64_t i = 0; i < T; ++i) tokens[i] = static_cast<int32_t>((i * 31 + 7) % 256);
  std::vector<float> logits(T * model.config().vocab_size);
  Arena arena;
  for (auto _ : st) {
    forward_logits(model, tokens.data(), 1, T, logits.data(), fo, arena);
    benchmark::ClobberMemory();
  }
  bench::report_throughput(st, form_name(fo.form), T, "arena_MiB", arena.high_water());
}

// T = 2048 in each form; chunkwise with chunks of 64 and 128.
void FormSweep(benchmark::internal::Benchmark* b) {
  b->ArgNames({"form", "T", "chunk"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
  for (const auto& [form, chunk] : {std::pair{0, 0}, {1, 64}, {1, 128}, {2, 0}, {3, 0}})
    b->Args({form, 2048, chunk});
}

}  // namespace

BENCHMARK(BM_ModelForward)->Apply(FormSweep);

BENCHMARK_MAIN();
