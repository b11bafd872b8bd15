// GEMM throughput of the BLAS the engine loads (with its core type set by the engine), at 1024^3
// and at the shapes of the default model. The peak found here is the denominator of MFU figures.
#include <benchmark/benchmark.h>

#include <vector>

#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"

using namespace retnet;

static void BM_Sgemm(benchmark::State& st) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  set_num_threads(static_cast<int>(st.range(3)));
  std::vector<float> A(M * K, 0.5f), B(N * K, 0.25f), C(M * N);
  for (auto _ : st) {
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C.data(), N);
    benchmark::ClobberMemory();
  }
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
  st.SetLabel(blas_info().corename + " threads=" + std::to_string(st.range(3)));
  set_num_threads(0);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K", "threads"})
    ->Args({1024, 1024, 1024, 1})
    ->Args({1024, 1024, 1024, 2})
    ->Args({2048, 1536, 256, 2})   // q|k|v|g projection of the default model, T = 2048
    ->Args({2048, 256, 512, 2})    // out projection
    ->Args({2048, 1024, 256, 2})   // fc1|gate
    ->Args({2048, 256, 256, 2})    // LM head
    ->Args({1, 1536, 256, 1})      // one decode step's projection (sgemv path)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
