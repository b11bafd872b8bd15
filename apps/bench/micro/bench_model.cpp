// Whole-model forward throughput in each form at T = 2048, for the benchmark config of the issues
// (d 256, value 512, 4 heads, FFN 512, swish, 4 layers, vocab 256), batch 1.
#include <benchmark/benchmark.h>

#include <vector>

#include "retnet/model/forward.h"

using namespace retnet;

namespace {

const Model& bench_model() {
  static Model m = [] {
    Config c;
    c.embed_dim = 256;
    c.value_embed_dim = 512;
    c.heads = 4;
    c.ffn_dim = 512;
    c.layers = 4;
    c.vocab_size = 256;
    c.activation = Activation::Swish;
    return Model::init(c, 1);
  }();
  return m;
}

// Args: form (0 parallel, 1 chunkwise, 2 scan, 3 recurrent), T, chunk.
void BM_ModelForward(benchmark::State& st) {
  const Model& model = bench_model();
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
  st.SetLabel(form_name(fo.form));
  st.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["arena_MiB"] = static_cast<double>(arena.high_water() * 4) / (1 << 20);
}

}  // namespace

BENCHMARK(BM_ModelForward)
    ->ArgNames({"form", "T", "chunk"})
    ->Args({0, 2048, 0})
    ->Args({1, 2048, 64})
    ->Args({1, 2048, 128})
    ->Args({2, 2048, 0})
    ->Args({3, 2048, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

BENCHMARK_MAIN();
