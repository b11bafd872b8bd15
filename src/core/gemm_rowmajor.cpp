// Products against row-major weights used where they lie (retnet/core/gemm_rowmajor.h): decode
// kernels per ISA, picked at run time, and the prefill path (block conversion + sgemm).
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (see gemm_skinny.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "retnet/core/gemm_rowmajor.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"

namespace retnet {
namespace {

inline float to_float(float w) { return w; }
inline float to_float(uint16_t w) { return half_to_float(w); }
inline float to_float(BFloat16 w) { return bf16_to_float(w.bits); }

// Weight rows per task: each task streams 8 consecutive rows once for every row of A.
constexpr int64_t kRowsPerTask = 8;

template <typename W>
using BlockFn = void (*)(int64_t M, const float* A, int64_t lda, const W* B, int64_t ldb,
                         float beta, float* C, int64_t ldc, int64_t N, int64_t K, int64_t n0,
                         int64_t rows);

// Batch 1 read as streams: `count` (1 to kStreams) weight rows w[i] against the one row of A,
// side by side, into *c[i], by the kernel's own block (so each output is the same FMA chain).
constexpr int kStreams = 4;
template <typename W>
using StreamsFn = void (*)(const float* a, const W* const* w, float* const* c, int count,
                           int64_t K, float beta);

// A kernel: the blocks of 8 rows for any M and, where it pays, batch 1 as streams.
template <typename W>
struct Kernel {
  BlockFn<W> rows;
  StreamsFn<W> batch1_streams = nullptr;
};

// Plain C++: 8 lanes, lane j summing k = j, j + 8, ... in order, then the lanes in order (the
// AVX2 kernel's order, so the two agree closely; they need not agree bit for bit).
template <typename W>
void rows_scalar(int64_t M, const float* A, int64_t lda, const W* B, int64_t ldb, float beta,
                 float* C, int64_t ldc, int64_t /*N*/, int64_t K, int64_t n0, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t m = 0; m < M; ++m) {
      const float* a = A + m * lda;
      const W* w = B + (n0 + r) * ldb;
      float lanes[8] = {};
      for (int64_t k = 0; k < K; ++k) lanes[k % 8] += a[k] * to_float(w[k]);
      const float dot = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                        ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
      float& c = C[m * ldc + n0 + r];
      c = beta == 0.f ? dot : dot + beta * c;
    }
}

#if defined(__x86_64__)
#define RETNET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RETNET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

RETNET_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
RETNET_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
RETNET_AVX2 inline __m256 load8(const BFloat16* p) {  // bf16 -> f32: the bits move to the top half
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
RETNET_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
RETNET_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
RETNET_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
RETNET_AVX512 inline __m512 load16(const BFloat16* p) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
RETNET_AVX512 inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Weight rows row[0..R) against rows 0..MR of A, into out[r][m * ldc]: R x MR accumulators of L
// lanes, each output one lane-wise FMA chain over the full vectors of k, then the K % L tail
// (zero-padded copies), then a fixed horizontal sum. With PF, the next R rows (row[r] + R * ldb:
// the rows are consecutive) are prefetched at the same column, a cache line at a time: a bf16 row
// of a 2,048-wide model is one 4 KiB page, where an Intel core's hardware prefetcher starts afresh
// (docs/design-notes.md#row-major-decode-kernels). Past the last row the prefetch reads
// nothing: a prefetch never faults. Every loop is unrolled so the accumulators stay in registers.
// The body is written once and compiled under each ISA's target attribute.
#define RETNET_ROWMAJOR_BLOCK(NAME, TARGET, REG, L, ZERO, LOADA, LOADW, FMA, HSUM)               \
  template <int R, int MR, bool PF, typename W>                                                 \
  TARGET void NAME(const float* A, int64_t lda, const W* const* row, int64_t ldb, float beta,    \
                   float* const* out, int64_t ldc, int64_t K) {                                 \
    REG acc[R][MR];                                                                             \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                          \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; ++m) acc[r][m] = ZERO();                 \
    const int64_t body = K / L * L;                                                              \
    for (int64_t k = 0; k < body; k += L) {                                                      \
      REG x[MR];                                                                                 \
      _Pragma("GCC unroll 4") for (int m = 0; m < MR; ++m) x[m] = LOADA(A + m * lda + k);        \
      if (PF && (k * static_cast<int64_t>(sizeof(W))) % 64 == 0)                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                      \
            _mm_prefetch(reinterpret_cast<const char*>(row[r] + R * ldb + k), _MM_HINT_T0);      \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                      \
        const REG w = LOADW(row[r] + k);                                                         \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; ++m) acc[r][m] = FMA(w, x[m], acc[r][m]); \
      }                                                                                          \
    }                                                                                            \
    if (body < K) {                                                                              \
      const int64_t n = K - body;                                                                \
      _Pragma("GCC unroll 4") for (int m = 0; m < MR; ++m) {                                     \
        float a[L] = {};                                                                         \
        std::memcpy(a, A + m * lda + body, static_cast<size_t>(n) * sizeof(float));              \
        const REG x = LOADA(a);                                                                  \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                    \
          W w[L] = {};                                                                           \
          std::memcpy(w, row[r] + body, static_cast<size_t>(n) * sizeof(W));                     \
          acc[r][m] = FMA(LOADW(w), x, acc[r][m]);                                               \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; ++m)                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                    \
      float& c = out[r][m * ldc];                                                                \
      const float dot = HSUM(acc[r][m]);                                                         \
      c = beta == 0.f ? dot : dot + beta * c;                                                    \
    }                                                                                            \
  }

RETNET_ROWMAJOR_BLOCK(block_avx2, RETNET_AVX2, __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps,
                      load8, _mm256_fmadd_ps, hsum8)
RETNET_ROWMAJOR_BLOCK(block_avx512, RETNET_AVX512, __m512, 16, _mm512_setzero_ps,
                      _mm512_loadu_ps, load16, _mm512_fmadd_ps, hsum16)
#undef RETNET_ROWMAJOR_BLOCK

// One task's rows (8, fewer at the end) against every row of A, in groups of up to 4 rows of A.
// Batch 1 with AVX-512 reads the weight rows one at a time (R1 = 1; the avx512 kernel reads batch
// 1 as streams instead, batch1_as_streams): one sequential stream per thread, which the memory
// system serves faster than eight rows side by side (docs/design-notes.md#row-major-decode-kernels;
// a 16-lane FMA chain per row keeps up with memory, and two chains per row gained no more).
// AVX2's 8-lane chain would make one row's FMA latency the limit (the same product
// was no faster that way), so it keeps 8 rows side by side (R1 = 8) where batch 1 is not read as
// streams (avx2-prefetch, Intel). Registers for more rows of A:
// AVX2 has 16, so 2 rows take 4 weight rows at once, 3-4 rows 2; AVX-512 has 32: 8 weight rows
// for 2 rows of A, 4 for 3-4.
// PF12 / PF34: software prefetch for 1-2 / 3-4 rows of A. An AMD core streams across the rows'
// pages by itself, and there the prefetches, which hold the core's few L1 miss buffers, slow 1-2
// rows; with 3 or more rows there is more arithmetic per byte, the core runs less far ahead, and
// they pay (docs/design-notes.md#row-major-decode-kernels).
#define RETNET_ROWMAJOR_ROWS(NAME, TARGET, BLOCK, PF12, PF34, R1, R2, R3)                        \
  template <typename W>                                                                         \
  TARGET void NAME(int64_t M, const float* A, int64_t lda, const W* B, int64_t ldb, float beta,  \
                   float* C, int64_t ldc, int64_t /*N*/, int64_t K, int64_t n0, int64_t rows) {  \
    const W* row[kRowsPerTask];                                                                 \
    for (int64_t r = 0; r < rows; ++r) row[r] = B + (n0 + r) * ldb;                              \
    for (int64_t m0 = 0; m0 < M; m0 += 4) {                                                      \
      const float* a = A + m0 * lda;                                                             \
      float* out[kRowsPerTask];                                                                 \
      for (int64_t r = 0; r < rows; ++r) out[r] = C + m0 * ldc + n0 + r;                         \
      const int64_t mr = std::min<int64_t>(4, M - m0);                                           \
      if (rows < kRowsPerTask) {                                                                 \
        for (int64_t r = 0; r < rows; ++r) switch (mr) {                                         \
            case 1: BLOCK<1, 1, PF12>(a, lda, row + r, ldb, beta, out + r, ldc, K); break;       \
            case 2: BLOCK<1, 2, PF12>(a, lda, row + r, ldb, beta, out + r, ldc, K); break;       \
            case 3: BLOCK<1, 3, PF34>(a, lda, row + r, ldb, beta, out + r, ldc, K); break;       \
            default: BLOCK<1, 4, PF34>(a, lda, row + r, ldb, beta, out + r, ldc, K); break;      \
          }                                                                                      \
        continue;                                                                                \
      }                                                                                          \
      switch (mr) {                                                                              \
        case 1:                                                                                  \
          for (int r = 0; r < 8; r += R1) BLOCK<R1, 1, PF12>(a, lda, row + r, ldb, beta, out + r, ldc, K); \
          break;                                                                                 \
        case 2:                                                                                  \
          for (int r = 0; r < 8; r += R2) BLOCK<R2, 2, PF12>(a, lda, row + r, ldb, beta, out + r, ldc, K); \
          break;                                                                                 \
        case 3:                                                                                  \
          for (int r = 0; r < 8; r += R3) BLOCK<R3, 3, PF34>(a, lda, row + r, ldb, beta, out + r, ldc, K); \
          break;                                                                                 \
        default:                                                                                 \
          for (int r = 0; r < 8; r += R3) BLOCK<R3, 4, PF34>(a, lda, row + r, ldb, beta, out + r, ldc, K); \
          break;                                                                                 \
      }                                                                                          \
    }                                                                                            \
  }
RETNET_ROWMAJOR_ROWS(rows_avx2, RETNET_AVX2, block_avx2, false, true, 8, 4, 2)
RETNET_ROWMAJOR_ROWS(rows_avx2_prefetch, RETNET_AVX2, block_avx2, true, true, 8, 4, 2)
RETNET_ROWMAJOR_ROWS(rows_avx512, RETNET_AVX512, block_avx512, false, true, 1, 8, 4)
RETNET_ROWMAJOR_ROWS(rows_avx512_prefetch, RETNET_AVX512, block_avx512, true, true, 1, 8, 4)
#undef RETNET_ROWMAJOR_ROWS

// Batch 1 as streams: `count` weight rows against the one row of A, by the blocks of one row of A
// without prefetch (the rows are not consecutive here).
#define RETNET_ROWMAJOR_STREAMS(NAME, TARGET, BLOCK)                                             \
  template <typename W>                                                                         \
  TARGET void NAME(const float* a, const W* const* w, float* const* c, int count, int64_t K,     \
                   float beta) {                                                                \
    static_assert(kStreams == 4);                                                               \
    switch (count) {                                                                            \
      case 1: return BLOCK<1, 1, false>(a, 0, w, 0, beta, c, 0, K);                              \
      case 2: return BLOCK<2, 1, false>(a, 0, w, 0, beta, c, 0, K);                              \
      case 3: return BLOCK<3, 1, false>(a, 0, w, 0, beta, c, 0, K);                              \
      default: return BLOCK<4, 1, false>(a, 0, w, 0, beta, c, 0, K);                             \
    }                                                                                           \
  }
RETNET_ROWMAJOR_STREAMS(streams_avx2, RETNET_AVX2, block_avx2)
RETNET_ROWMAJOR_STREAMS(streams_avx512, RETNET_AVX512, block_avx512)
#undef RETNET_ROWMAJOR_STREAMS
#endif

template <typename W>
Kernel<W> kernel_functions(RowMajorKernel kernel) {
  RETNET_CHECK(rowmajor_kernel_available(kernel),
               "the {} kernel for row-major weights needs a CPU feature this machine lacks",
               rowmajor_kernel_name(kernel));
#if defined(__x86_64__)
  if (kernel == RowMajorKernel::Avx512) return {rows_avx512<W>, streams_avx512<W>};
  if (kernel == RowMajorKernel::Avx512Prefetch) return {rows_avx512_prefetch<W>};
  if (kernel == RowMajorKernel::Avx2) return {rows_avx2<W>, streams_avx2<W>};
  if (kernel == RowMajorKernel::Avx2Prefetch) return {rows_avx2_prefetch<W>};
#endif
  return {rows_scalar<W>};
}

// Batch 1 as streams: each thread takes a contiguous run of the stacked rows, split into kStreams
// equal stretches read side by side, row after row, so every stretch is one long sequential
// stream. Rows one at a time leave one FMA chain per core in flight, which caps the read below what
// memory can give; 4 streams lift that cap and read memory as fast as one. 8 rows of one task
// side by side give 8 chains but streams 4 KiB long, which the prefetcher finds again at every
// task; 2 streams lift the cap less (docs/design-notes.md#batch-1-as-streams).
template <typename W>
void batch1_as_streams(StreamsFn<W> streams, int parts, const W* const* B,
                       const int64_t* first_column, int64_t K, const float* a, int64_t ldb,
                       float beta, float* C, bool parallel) {
  const int64_t total = first_column[parts];
#pragma omp parallel if (parallel)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = total * t / threads, end = total * (t + 1) / threads;
    const int64_t stretch = (end - begin) / kStreams;
    const W* w[kStreams];
    float* c[kStreams];
    auto locate = [&](int64_t n, int i) {
      int part = 0;
      while (n >= first_column[part + 1]) ++part;
      w[i] = B[part] + (n - first_column[part]) * ldb;
      c[i] = C + n;
    };
    for (int64_t j = 0; j < stretch; ++j) {
      for (int i = 0; i < kStreams; ++i) locate(begin + i * stretch + j, i);
      streams(a, w, c, kStreams, K, beta);
    }
    for (int64_t n = begin + kStreams * stretch; n < end; ++n) {
      locate(n, 0);
      streams(a, w, c, 1, K, beta);
    }
  }
}

// Parts stacked as one matrix (RowMajorParts): part i's rows go to C's columns after part i-1's.
// One parallel region for all of them: a fork and join per part costs a scheduler quantum when
// the cores are shared with other work.
template <typename W>
void few_rows(const Kernel<W>& kernel, int64_t M, int parts, const W* const* B,
              const int64_t* part_rows, int64_t K, const float* A, int64_t lda, int64_t ldb,
              float beta, float* C, int64_t ldc) {
  RETNET_CHECK(parts >= 1 && parts <= kMaxRowMajorParts, "{} parts of a row-major product (1 to {})",
               parts, kMaxRowMajorParts);
  int64_t first_task[kMaxRowMajorParts + 1] = {0}, first_column[kMaxRowMajorParts + 1] = {0};
  for (int i = 0; i < parts; ++i) {
    first_task[i + 1] = first_task[i] + (part_rows[i] + kRowsPerTask - 1) / kRowsPerTask;
    first_column[i + 1] = first_column[i] + part_rows[i];
  }
  const int64_t tasks = first_task[parts];
  // Threads only when the product is worth a fork (below ~32k multiply-adds one thread wins).
  // Static schedule: each thread streams one contiguous run of rows.
  const bool parallel = M * first_column[parts] * K >= (1 << 15) && tasks > 1;
  if (M == 1 && kernel.batch1_streams) {
    batch1_as_streams(kernel.batch1_streams, parts, B, first_column, K, A, ldb, beta, C, parallel);
    return;
  }
  const BlockFn<W> rows = kernel.rows;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; ++t) {
    int part = 0;
    while (t >= first_task[part + 1]) ++part;
    const int64_t n0 = (t - first_task[part]) * kRowsPerTask;
    rows(M, A, lda, B[part], ldb, beta, C + first_column[part], ldc, part_rows[part], K, n0,
         std::min(kRowsPerTask, part_rows[part] - n0));
  }
}

template <typename W>
void few_rows(const Kernel<W>& kernel, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const W* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  few_rows(kernel, M, 1, &B, &N, K, A, lda, ldb, beta, C, ldc);
}

// Prefill: rows of W converted to float32 a block at a time (converted_block_rows, reused across
// calls), then sgemm. The conversion is O(N K) against the product's O(M N K).
template <typename W>
void converted_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* B,
                    int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t block_rows = converted_block_rows(N, K);
  thread_local std::vector<float> block;
  block.resize(static_cast<size_t>(block_rows * K));
  for (int64_t n0 = 0; n0 < N; n0 += block_rows) {
    const int64_t rows = std::min(block_rows, N - n0);
    float* b = block.data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) rowmajor_row(B, ldb, K, n0 + r, 1.f, b + r * K);
    sgemm(Trans::No, Trans::Yes, M, rows, K, 1.f, A, lda, b, K, beta, C + n0, ldc);
  }
}

template <typename W>
void product(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* B, int64_t ldb,
             float beta, float* C, int64_t ldc) {
  if (M <= kSkinnyMaxRows) {
    static const Kernel<W> best = kernel_functions<W>(rowmajor_kernel_best());
    few_rows(best, M, N, K, A, lda, B, ldb, beta, C, ldc);
  } else if constexpr (std::is_same_v<W, float>) {
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  } else {
    converted_gemm(M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
}

template <typename W>
void parts_product(int64_t M, int64_t K, const float* A, int64_t lda, int parts,
                   const W* const* B, const int64_t* rows, float beta, float* C, int64_t ldc) {
  if (M <= kSkinnyMaxRows) {
    static const Kernel<W> best = kernel_functions<W>(rowmajor_kernel_best());
    few_rows(best, M, parts, B, rows, K, A, lda, K, beta, C, ldc);
    return;
  }
  for (int i = 0, column = 0; i < parts; column += static_cast<int>(rows[i]), ++i)
    product(M, rows[i], K, A, lda, B[i], K, beta, C + column, ldc);
}

template <typename W>
void reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(A[m * lda + k]) * to_float(B[n * ldb + k]);
      float& c = C[m * ldc + n];
      c = static_cast<float>(beta == 0.f ? acc : acc + static_cast<double>(beta) * c);
    }
}

template <typename W>
void row_of(const W* B, int64_t ldb, int64_t K, int64_t n, float scale, float* out) {
  const W* w = B + n * ldb;
  for (int64_t k = 0; k < K; ++k) out[k] = scale * to_float(w[k]);
}

}  // namespace

const char* rowmajor_kernel_name(RowMajorKernel kernel) {
  switch (kernel) {
    case RowMajorKernel::Avx2:
      return "avx2";
    case RowMajorKernel::Avx2Prefetch:
      return "avx2-prefetch";
    case RowMajorKernel::Avx512:
      return "avx512";
    case RowMajorKernel::Avx512Prefetch:
      return "avx512-prefetch";
    default:
      return "scalar";
  }
}

bool rowmajor_kernel_available(RowMajorKernel kernel) {
#if defined(__x86_64__)
  // F16C from cpuid itself: clang before 15 does not know it as a __builtin_cpu_supports name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (kernel) {
    case RowMajorKernel::Avx2:
    case RowMajorKernel::Avx2Prefetch:
      return avx2;
    case RowMajorKernel::Avx512:
    case RowMajorKernel::Avx512Prefetch:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    default:
      return true;
  }
#else
  return kernel == RowMajorKernel::Scalar;
#endif
}

RowMajorKernel rowmajor_kernel_best() {
  static const RowMajorKernel best = [] {
#if defined(__x86_64__)
    // AMD cores stream across the rows' pages by themselves; Intel ones need the prefetches.
    switch (kernel_isa()) {
      case Isa::Avx512:
        return __builtin_cpu_is("amd") ? RowMajorKernel::Avx512 : RowMajorKernel::Avx512Prefetch;
      case Isa::Avx2:
        return __builtin_cpu_is("amd") ? RowMajorKernel::Avx2 : RowMajorKernel::Avx2Prefetch;
      default:
        break;
    }
#endif
    return RowMajorKernel::Scalar;
  }();
  return best;
}

#define RETNET_ROWMAJOR_API(W)                                                                  \
  void rowmajor_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,           \
                        const W* B, int64_t ldb, float beta, float* C, int64_t ldc) {           \
    product(M, N, K, A, lda, B, ldb, beta, C, ldc);                                             \
  }                                                                                             \
  void rowmajor_gemm_nt_with(RowMajorKernel kernel, int64_t M, int64_t N, int64_t K,            \
                             const float* A, int64_t lda, const W* B, int64_t ldb, float beta,  \
                             float* C, int64_t ldc) {                                           \
    few_rows(kernel_functions<W>(kernel), M, N, K, A, lda, B, ldb, beta, C, ldc);                  \
  }                                                                                             \
  void rowmajor_gemm_nt_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, \
                                  const W* B, int64_t ldb, float beta, float* C, int64_t ldc) { \
    reference(M, N, K, A, lda, B, ldb, beta, C, ldc);                                           \
  }                                                                                             \
  void rowmajor_row(const W* B, int64_t ldb, int64_t K, int64_t n, float scale, float* out) {   \
    row_of(B, ldb, K, n, scale, out);                                                           \
  }                                                                                             \
  void rowmajor_gemm_nt_parts(int64_t M, int64_t K, const float* A, int64_t lda, int parts,     \
                              const W* const* B, const int64_t* rows, float beta, float* C,     \
                              int64_t ldc) {                                                    \
    parts_product(M, K, A, lda, parts, B, rows, beta, C, ldc);                                  \
  }
RETNET_ROWMAJOR_API(float)
RETNET_ROWMAJOR_API(uint16_t)
RETNET_ROWMAJOR_API(BFloat16)
#undef RETNET_ROWMAJOR_API

}  // namespace retnet
