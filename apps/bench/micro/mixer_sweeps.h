// Argument sweeps shared by the mixer benchmarks with a key/value cache (bench_aft,
// bench_attention): BM_Mixer over (kind, T) in milliseconds, BM_Decode over (mixer, cache) in
// microseconds, both timed by the wall clock for at least 0.2 s.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <initializer_list>

namespace retnet::bench {

inline void mixer_sweep(benchmark::internal::Benchmark* b, int kinds,
                        std::initializer_list<int64_t> lengths) {
  b->ArgNames({"kind", "T"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
  for (int64_t T : lengths)
    for (int kind = 0; kind < kinds; ++kind) b->Args({kind, T});
}

// Two mixers (0 and 1) at each cached length.
inline void decode_sweep(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> cached) {
  b->ArgNames({"mixer", "cache"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  for (int64_t n : cached)
    for (int mixer = 0; mixer < 2; ++mixer) b->Args({mixer, n});
}

}  // namespace retnet::bench
