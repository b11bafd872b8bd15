// Training throughput (forward + backward + AdamW) of the benchmark config of the issues (d 256,
// value 512, 4 heads, FFN 512, swish, 4 layers, vocab 256) in the parallel and chunkwise forms, at
// batch 8 x 256, 2 x 1024 and 1 x 4096, with the size of the activation arena.
#include <benchmark/benchmark.h>

#include <utility>
#include <vector>

#include "micro_common.h"
#include "retnet/core/arena.h"
#include "retnet/core/parallel.h"
#include "retnet/model/training.h"
#include "retnet/train/optimizer.h"

using namespace retnet;

namespace {

// Args: form (0 parallel, 1 chunkwise), B, T.
void BM_TrainStep(benchmark::State& st) {
  set_num_threads(0);  // all cores, denormals flushed, as the CLI runs
  Model& model = bench::issue_benchmark_model();
  const int64_t B = st.range(1), T = st.range(2);
  TrainingOptions to;
  to.form = st.range(0) == 0 ? Form::Parallel : Form::Chunkwise;
  to.chunk = 64;
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) in[i] = (i * 31 + 7) % 256, tgt[i] = (i * 17 + 3) % 256;
  ParamBuffer grads(model.params().layout());
  AdamW opt(model.params().layout(), AdamWOptions{});
  Arena arena;
  for (auto _ : st) {
    std::fill(grads.data(), grads.data() + grads.size(), 0.f);
    loss_and_gradients(model, in.data(), tgt.data(), B, T, to, arena, &grads);
    clip_gradients(grads, 1.0);
    opt.update(model.params(), grads, 1e-4);
  }
  bench::report_throughput(st, form_name(to.form), B * T, "arena_MiB", arena.capacity());
}

// Batches of 8 x 256, 2 x 1024 and 1 x 4096 tokens, each in both forms.
void BatchSweep(benchmark::internal::Benchmark* b) {
  b->ArgNames({"form", "B", "T"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
  for (const auto& [B, T] : {std::pair{8, 256}, {2, 1024}, {1, 4096}})
    for (int form = 0; form < 2; ++form) b->Args({form, B, T});
}

}  // namespace

BENCHMARK(BM_TrainStep)->Apply(BatchSweep);

BENCHMARK_MAIN();
