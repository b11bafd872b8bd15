// GEMM throughput of the BLAS the engine loads (with its core type set by the engine), at 1024^3
// and at the shapes of the default model. The peak found here is the denominator of MFU figures.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/parallel.h"
#include "retnet/core/quant.h"

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

// Prefill from packed weights (--dtype f32|bf16: blocks of panels unpacked to float32 for sgemm)
// against sgemm on the float32 matrix, at a 1.3B fla model's fc1|gate shape (M tokens, 2 x 2816
// outputs, 2048 inputs): the ratio of the two is the packed path's share of the GEMM ceiling.
static void BM_PackedPrefill(benchmark::State& st) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2), type = st.range(3);
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.25f), C(M * N);
  std::vector<float> f32(type == 1 ? packed_weight_elements(N, K) : 0);
  std::vector<BFloat16> bf16(type == 2 ? packed_weight_elements(N, K) : 0);
  if (type == 1) pack_weights(W.data(), N, K, K, f32.data());
  if (type == 2) pack_weights_bf16(W.data(), N, K, K, bf16.data());
  for (auto _ : st) {
    if (type == 0)
      sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, A.data(), K, W.data(), K, 0.f, C.data(), N);
    else if (type == 1)
      packed_gemm_nt(M, N, K, A.data(), K, f32.data(), 0.f, C.data(), N);
    else
      packed_gemm_nt_bf16(M, N, K, A.data(), K, bf16.data(), 0.f, C.data(), N);
    benchmark::ClobberMemory();
  }
  st.counters["GFLOPS"] = benchmark::Counter(
      2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.SetLabel(type == 0 ? "sgemm f32" : type == 1 ? "packed f32" : "packed bf16");
}
BENCHMARK(BM_PackedPrefill)
    ->ArgNames({"M", "N", "K", "type"})
    ->Args({512, 5632, 2048, 0})
    ->Args({512, 5632, 2048, 1})
    ->Args({512, 5632, 2048, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Weights used where they lie (row-major, a mapped file) against the packed panels, in the same
// run, at a 1.3B fla model's fc1|gate shape (2 x 2816 outputs, 2048 inputs: 23 MB in bf16, far
// beyond the caches, so batch 1 measures the weight stream): M rows (decode batch 1..64, prefill
// 512), type 0 f32, 1 f16, 2 bf16, layout 0 packed, 1 row-major. GB/s counts the weight bytes.
static void BM_WeightLayout(benchmark::State& st) {
  const int64_t M = st.range(0), type = st.range(1), row_major = st.range(2);
  const int64_t N = 5632, K = 2048;
  std::vector<float> A(M * K, 0.5f), C(M * N), W(N * K);
  for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>(i % 97) / 97.f - 0.5f;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<BFloat16> bf16;
  const size_t n = row_major ? W.size() : packed_weight_elements(N, K);
  if (type == 0) {
    f32.resize(n);
    if (row_major) f32 = W; else pack_weights(W.data(), N, K, K, f32.data());
  } else if (type == 1) {
    f16.resize(n);
    if (row_major)
      for (size_t i = 0; i < n; ++i) f16[i] = float_to_half(W[i]);
    else
      pack_weights_f16(W.data(), N, K, K, f16.data());
  } else {
    bf16.resize(n);
    if (row_major)
      for (size_t i = 0; i < n; ++i) bf16[i] = BFloat16{float_to_bf16(W[i])};
    else
      pack_weights_bf16(W.data(), N, K, K, bf16.data());
  }
  for (auto _ : st) {
    if (type == 0 && row_major)
      rowmajor_gemm_nt(M, N, K, A.data(), K, f32.data(), K, 0.f, C.data(), N);
    else if (type == 0)
      packed_gemm_nt(M, N, K, A.data(), K, f32.data(), 0.f, C.data(), N);
    else if (type == 1 && row_major)
      rowmajor_gemm_nt(M, N, K, A.data(), K, f16.data(), K, 0.f, C.data(), N);
    else if (type == 1)
      packed_gemm_nt_f16(M, N, K, A.data(), K, f16.data(), 0.f, C.data(), N);
    else if (row_major)
      rowmajor_gemm_nt(M, N, K, A.data(), K, bf16.data(), K, 0.f, C.data(), N);
    else
      packed_gemm_nt_bf16(M, N, K, A.data(), K, bf16.data(), 0.f, C.data(), N);
    benchmark::ClobberMemory();
  }
  const double bytes = double(N * K) * (type == 0 ? 4 : 2);
  st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                           benchmark::Counter::kIs1000);
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
  st.SetLabel(std::string(type == 0 ? "f32 " : type == 1 ? "f16 " : "bf16 ") +
              (row_major ? "row-major (" + std::string(rowmajor_kernel_name(rowmajor_kernel_best())) + ")"
                         : "packed"));
}
BENCHMARK(BM_WeightLayout)
    ->ArgNames({"M", "type", "rowmajor"})
    ->ArgsProduct({{1, 4, 16, 64}, {0, 1, 2}, {0, 1}})
    ->Args({512, 0, 0})
    ->Args({512, 0, 1})
    ->Args({512, 2, 0})
    ->Args({512, 2, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Decode products against quantised weights (M rows, N x K weights of type 0 q8_0, 1 q4_0,
// 2 q4_1) with a chosen kernel (0 scalar, 1 avx2, 2 avx512-vnni, 3 avx512-vnni-512). "GB/s"
// counts the weight bytes read: with weights far larger than the caches it is the share of the
// read bandwidth reached; with weights that fit in L2/L3 it shows how fast the kernel's
// instructions can go.
static void BM_QuantDecode(benchmark::State& st) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  const QuantType type = QuantType(st.range(3));
  const QuantKernel kernel = QuantKernel(st.range(4));
  if (!quant_kernel_available(kernel)) {
    st.SkipWithError("this CPU lacks the kernel");
    return;
  }
  std::vector<float> A(M * K), W(N * K), C(M * N);
  for (size_t i = 0; i < W.size(); ++i)
    W[i] = float(int64_t(i * 2654435761u % 2001) - 1000) / 1000;
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int64_t(i * 40503u % 2001) - 1000) / 1000;
  std::vector<uint8_t> rows(N * quant_row_bytes(type, K)), q(quant_panel_bytes(type, N, K));
  quantize_rows(type, W.data(), N, K, K, rows.data());
  pack_quant_panels(type, rows.data(), N, K, q.data());
  W = {};
  rows = {};
  for (auto _ : st) {
    quant_gemm_nt_with(kernel, type, M, N, K, A.data(), K, q.data(), 0.f, C.data(), N);
    benchmark::ClobberMemory();
  }
  st.counters["GB/s"] = benchmark::Counter(
      double(q.size()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.SetLabel(std::string(quant_type_name(type)) + " " + quant_kernel_name(kernel));
}
BENCHMARK(BM_QuantDecode)
    ->ArgNames({"M", "N", "K", "type", "kernel"})
    ->ArgsProduct({{1}, {128, 2048, 32768}, {2048}, {0, 1, 2}, {1, 2, 3}})
    ->ArgsProduct({{1}, {65536}, {1024}, {0, 1, 2}, {1, 2, 3}})
    ->Args({1, 2048, 2048, 0, 0})
    ->Args({1, 16, 2048, 0, 1})
    ->ArgsProduct({{8}, {2048}, {2048}, {0, 1}, {1, 2, 3}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
