// Helpers shared by the Google Benchmark programs: their fixed random inputs, the counters every
// throughput benchmark reports, the model of the issues' benchmark config, and softmax attention's
// forward (+ backward), the baseline several mixers are timed against.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/rng.h"
#include "retnet/core/tensor.h"
#include "retnet/mixers/attention.h"
#include "retnet/model/model.h"

namespace retnet::bench {

// n normal draws of Philox(7) stream `stream`, times `scale`.
inline std::vector<float> random_floats(int64_t n, uint64_t stream, double scale) {
  Philox rng(7);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(scale * rng.normal(stream, i));
  return x;
}

inline double mebibytes(size_t floats) { return static_cast<double>(floats * 4) / (1 << 20); }

// Labels a run and reports its tokens per second (`tokens` per iteration, over the timer) and a
// memory counter `memory_name`: `memory_floats` floats in MiB.
inline void report_throughput(benchmark::State& st, const std::string& label, int64_t tokens,
                              const char* memory_name, size_t memory_floats) {
  st.SetLabel(label);
  st.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens),
                                                   benchmark::Counter::kIsIterationInvariantRate);
  st.counters[memory_name] = mebibytes(memory_floats);
}

// The same, with the arena's high-water mark as "workspace_MiB": the kernels' workspace.
inline void report_throughput(benchmark::State& st, const std::string& label, int64_t tokens,
                              const Arena& workspace) {
  report_throughput(st, label, tokens, "workspace_MiB", workspace.high_water());
}

// The benchmark config of the issues (d 256, value 512, 4 heads, FFN 512, 4 layers, vocab 256:
// the defaults) with swish, initialised from seed 1: one instance per program.
inline Model& issue_benchmark_model() {
  static Model m = [] {
    Config c;
    c.activation = Activation::Swish;
    return Model::init(c, 1);
  }();
  return m;
}

// Times run() once per iteration, the arena reset before each call.
template <typename Run>
void time_with_arena(benchmark::State& st, Arena& arena, Run run) {
  for (auto _ : st) {
    arena.reset();
    run();
    benchmark::ClobberMemory();
  }
}

// A decode benchmark's key/value cache of one sequence: the storage a *_cache_reserve sizes, and
// the sequence's length, which a step advances.
struct DecodeCache {
  std::vector<float> storage;
  std::vector<int64_t> length{0};
  // Fills `floats` floats with random rows, a cache of `cached` tokens: their values do not change
  // a step's cost.
  void fill(size_t floats, uint64_t stream, double scale, int64_t cached) {
    const std::vector<float> rows = random_floats(static_cast<int64_t>(floats), stream, scale);
    std::copy(rows.begin(), rows.end(), storage.begin());
    length[0] = cached;
  }
};

// A softmax attention layer's operands, [1, T, H, D] views each.
struct AttentionViews {
  TensorView q, k, v, out, d_out, d_q, d_k, d_v;
};

// Arena floats of run_attention at B = 1: the larger of the forward's and the backward's.
inline size_t attention_train_workspace_floats(int64_t T, int64_t H, int64_t D) {
  return std::max(attention_workspace_floats(T, D, D, kAttentionDefaultTile),
                  attention_backward_workspace_floats(1, T, H, D, D, kAttentionDefaultTile));
}

// Attention's forward (logsumexp [T, H] kept for the backward), then, when `train`, its backward.
inline void run_attention(const AttentionViews& x, bool train, Arena& arena, float* logsumexp) {
  AttentionArgs a;
  a.q = x.q, a.k = x.k, a.v = x.v, a.out = x.out;
  a.logsumexp = logsumexp;
  attention_forward(a, arena);
  if (!train) return;
  AttentionGradArgs g;
  g.q = x.q, g.k = x.k, g.v = x.v, g.out = x.out, g.d_out = x.d_out;
  g.d_q = x.d_q, g.d_k = x.d_k, g.d_v = x.d_v;
  g.logsumexp = logsumexp;
  arena.reset();
  attention_backward(g, arena);
}

}  // namespace retnet::bench
