// The packed panels' few-row products (retnet/core/gemm.h, packed_gemm_nt), compiled once per
// instruction-set level (retnet/core/isa_kernels.h): AVX-512 16-lane panels, AVX2 half panels, or
// plain C++. The kernel broadcasts A[m,k] and multiplies a whole panel row: no horizontal sums,
// fully vectorised for any M, so batched decoding runs at GEMM-like speed while batch 1 streams
// the weights once. Each C[m,n] is summed over k in order 0..K-1 in one vector lane whatever M is:
// batched results equal single-sequence results bit for bit.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers, see gemm_skinny
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include <immintrin.h>

#include <algorithm>

#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/isa_kernels.h"

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

constexpr int64_t kPanel = 16;  // output columns per panel (one AVX-512 register)

inline float to_float(float w) { return w; }
inline float to_float(uint16_t w) { return half_to_float(w); }
inline float to_float(BFloat16 w) { return bf16_to_float(w.bits); }
constexpr int kPanelsPerTask = 4;  // 64 outputs x up to 4 rows of A = 16 accumulators

#if defined(__AVX512F__)
inline __m512 load_panel(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_panel(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_panel(const BFloat16* p) {  // bf16 -> f32: the bits move to the top half
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// C[m0..m0+R, panels p0..p0+P) of 16 columns each.
template <int R, int P, typename W>
void tile(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
          int64_t ldc, int64_t N, int64_t m0, int64_t p0) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const W* w = packed + p0 * K * kPanel;
  for (int64_t k = 0; k < K; ++k) {
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = load_panel(w + (p * K + k) * kPanel);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[(m0 + r) * lda + k]);
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(a, wv[p], acc[r][p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t n0 = (p0 + p) * kPanel, cols = std::min<int64_t>(kPanel, N - n0);
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
    for (int r = 0; r < R; ++r) {
      float* c = C + (m0 + r) * ldc + n0;
      __m512 v = acc[r][p];
      if (beta != 0.f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, c), v);
      _mm512_mask_storeu_ps(c, mask, v);
    }
  }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// A panel is two 8-lane registers; 16 registers hold 12 accumulators, the weights being read and a
// broadcast. Batch 1 reads 4 panels at once, 2-4 rows take half-panel tiles (few_rows_gemm), more
// rows six at a time through one panel (`rows` below).
inline __m256 load_half(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_half(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_half(const BFloat16* p) {  // bf16 -> f32: the bits move to the top half
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
template <typename W>
inline void load_panel(const W* p, __m256& lo, __m256& hi) {
  lo = load_half(p);
  hi = load_half(p + 8);
}

// Lanes [0, n) of an 8-lane mask register (n clamped to 0..8).
inline __m256i lane_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))),
                            lanes);
}

inline void store_lanes(float* c, int64_t n, __m256 v, float beta) {
  if (n <= 0) return;
  if (n >= 8) {
    if (beta != 0.f) v = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c), v);
    _mm256_storeu_ps(c, v);
    return;
  }
  const __m256i mask = lane_mask(n);
  if (beta != 0.f) v = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(c, mask), v);
  _mm256_maskstore_ps(c, mask, v);
}

// With kPrefetch, `next` is a panel to pull into the cache meanwhile, one line per k (a template
// flag: batch 1's loop stays free of the test).
template <int R, int P, typename W, bool kPrefetch = false>
void tile(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
          int64_t ldc, int64_t N, int64_t m0, int64_t p0, const W* next = nullptr) {
  // Every loop over the tile is unrolled: an accumulator indexed at run time anywhere makes GCC
  // keep the array in memory and store all of it on every k
  // (docs/design-notes.md#packed-decode-kernels).
  __m256 acc[R][P][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  const W* w = packed + p0 * K * kPanel;
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (kPrefetch)
      _mm_prefetch(reinterpret_cast<const char*>(next + k * kPanel), _MM_HINT_T0);
    __m256 lo[P], hi[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) load_panel(w + (p * K + k) * kPanel, lo[p], hi[p]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + (m0 + r) * lda + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        acc[r][p][0] = _mm256_fmadd_ps(a, lo[p], acc[r][p][0]);
        acc[r][p][1] = _mm256_fmadd_ps(a, hi[p], acc[r][p][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t n0 = (p0 + p) * kPanel, cols = std::min<int64_t>(kPanel, N - n0);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* c = C + (m0 + r) * ldc + n0;
      store_lanes(c, cols, acc[r][p][0], beta);
      store_lanes(c + 8, cols - 8, acc[r][p][1], beta);
    }
  }
}

// 2 to 4 rows: a panel's two registers per row give only 4-8 accumulator chains, too few to hide
// the FMA latency (4 rows ran at half the 6-row speed). This tile takes V half-panels (8 columns
// each, from two or three panels) from half-panel h0: 4 rows x 3, 3 x 4, 2 x 5, all rows in one
// pass so each weight is read once. Each C[m,n] is still one lane's FMA chain over k = 0..K-1:
// batch invariance holds.
template <int R, int V, typename W>
void half_panel_tile(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
                     int64_t ldc, int64_t N, int64_t h0) {
  __m256 acc[R][V];
  const W* w[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t h = h0 + v;
    w[v] = packed + (h / 2) * K * kPanel + (h % 2) * 8;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m256 x[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      x[v] = load_half(w[v] + k * kPanel);
      // One load into a register, not one per row as an FMA operand (GCC's choice otherwise: 10
      // loads per 12 FMAs at 4 x 3), where accumulators, weights and broadcast fit 16 registers.
      if constexpr (R * V + V + 1 <= 16) asm("" : "+x"(x[v]));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(a, x[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t n0 = (h0 + v) * 8;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) store_lanes(C + r * ldc + n0, N - n0, acc[r][v], beta);
  }
}

// Half-panels per tile for R rows: 12 accumulator chains, but 2 rows take 5 (10 chains): 2 x 6
// needs 12 + 6 + 1 registers and GCC kept two accumulators on the stack.
template <int R>
constexpr int kHalfPanels = R == 2 ? 5 : 12 / R;

// All R rows against half-panels h0 .. h0 + count (count 1 to kHalfPanels<R>).
template <int R, typename W>
void half_panel_group(int64_t count, const float* A, int64_t lda, const W* packed, int64_t K,
                      float beta, float* C, int64_t ldc, int64_t N, int64_t h0) {
  constexpr int V = kHalfPanels<R>;
  switch (count) {
    case 5:
      if constexpr (V >= 5) return half_panel_tile<R, 5>(A, lda, packed, K, beta, C, ldc, N, h0);
      [[fallthrough]];
    case 4:
      if constexpr (V >= 4) return half_panel_tile<R, 4>(A, lda, packed, K, beta, C, ldc, N, h0);
      [[fallthrough]];
    case 3:
      return half_panel_tile<R, 3>(A, lda, packed, K, beta, C, ldc, N, h0);
    case 2:
      return half_panel_tile<R, 2>(A, lda, packed, K, beta, C, ldc, N, h0);
    default:
      return half_panel_tile<R, 1>(A, lda, packed, K, beta, C, ldc, N, h0);
  }
}

// All R rows against half-panels [h_begin, h_end), in groups of kHalfPanels<R>.
template <int R, typename W>
void half_panel_range(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
                      int64_t ldc, int64_t N, int64_t h_begin, int64_t h_end) {
  for (int64_t h = h_begin; h < h_end; h += kHalfPanels<R>)
    half_panel_group<R>(std::min<int64_t>(kHalfPanels<R>, h_end - h), A, lda, packed, K, beta, C,
                        ldc, N, h);
}

template <int R, typename W>
void few_rows_gemm(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
                   int64_t ldc, int64_t N) {
  constexpr int V = kHalfPanels<R>;
  const int64_t halves = (N + 7) / 8, groups = (halves + V - 1) / V;
  // Static schedule: each thread one contiguous run of groups.
  const bool parallel = R * N * K >= (1 << 15) && groups > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t g = 0; g < groups; ++g)
    half_panel_group<R>(std::min<int64_t>(V, halves - g * V), A, lda, packed, K, beta, C, ldc, N,
                        g * V);
}
#define RETNET_PACKED_AVX2 1
#else

template <int R, int P, typename W>
void tile(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
          int64_t ldc, int64_t N, int64_t m0, int64_t p0) {
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) {
      const W* w = packed + (p0 + p) * K * kPanel;
      float acc[kPanel] = {};
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < kPanel; ++j)
          acc[j] += A[(m0 + r) * lda + k] * to_float(w[k * kPanel + j]);
      const int64_t n0 = (p0 + p) * kPanel, cols = std::min<int64_t>(kPanel, N - n0);
      float* c = C + (m0 + r) * ldc + n0;
      for (int64_t j = 0; j < cols; ++j) c[j] = beta == 0.f ? acc[j] : acc[j] + beta * c[j];
    }
}
#endif

#if defined(RETNET_PACKED_AVX2)
// Eight-lane registers: batch 1 reads all P panels in one pass (2P accumulator chains); more rows
// go six at a time through one panel (12 accumulators, the panel's 2 registers and a broadcast:
// the classic 6x16 AVX2 tile), so the tile stays in registers.
// One pass over panel p streams it at one line per FMA group, faster than one core's hardware
// prefetch brings a single stream from L3 or memory (docs/design-notes.md#packed-decode-kernels).
// So the last pass over a panel also pulls in the next one: the next panel's
// first pass then reads the cache.
template <int R, typename W>
void panel_rows(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
                int64_t ldc, int64_t N, int64_t m0, int64_t p, const W* next) {
  if (next)
    tile<R, 1, W, true>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
  else
    tile<R, 1, W>(A, lda, packed, K, beta, C, ldc, N, m0, p);
}

// Rows m0 .. m0 + rows (1 to 6) of panel p.
template <typename W>
void panel_pass(int64_t rows, const float* A, int64_t lda, const W* packed, int64_t K, float beta,
                float* C, int64_t ldc, int64_t N, int64_t m0, int64_t p, const W* next) {
  switch (rows) {
    case 6:
      return panel_rows<6>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
    case 5:
      return panel_rows<5>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
    case 4:
      return panel_rows<4>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
    case 3:
      return panel_rows<3>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
    case 2:
      return panel_rows<2>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
    default:
      return panel_rows<1>(A, lda, packed, K, beta, C, ldc, N, m0, p, next);
  }
}

template <int P, typename W>
void rows(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
          int64_t ldc, int64_t N, int64_t M, int64_t p0) {
  if (M == 1) {  // batch 1: all P panels in one pass
    tile<1, P>(A, lda, packed, K, beta, C, ldc, N, 0, p0);
    return;
  }
  // Passes of six rows; six and four left over run as five and five (a 4-row tile's 8
  // accumulator chains are too few to hide the FMA latency: 16 rows ran faster as 6 + 5 + 5).
  // One to three rows left over after sixes go through the task's panels afterwards,
  // while they are still in L2, in the tiles that keep enough chains for so few rows.
  const int64_t tail = M % 6 <= 3 ? M % 6 : 0, body = M - tail;
  const int64_t passes = (body + 5) / 6;
  const bool five_five = body % 6 == 4 && body > 6;
  const int64_t panels = packed_panels(N);
  for (int64_t p = p0; p < p0 + P; ++p) {
    const W* next = p + 1 < panels ? packed + (p + 1) * K * kPanel : nullptr;
    for (int64_t i = 0, m0 = 0; i < passes; ++i) {
      const int64_t r = five_five && i + 2 >= passes ? 5 : std::min<int64_t>(6, body - m0);
      panel_pass(r, A, lda, packed, K, beta, C, ldc, N, m0, p,
                 i + 1 == passes ? next : static_cast<const W*>(nullptr));
      m0 += r;
    }
  }
  const int64_t h_begin = 2 * p0, h_end = std::min<int64_t>(2 * (p0 + P), (N + 7) / 8);
  const float* a = A + body * lda;
  float* c = C + body * ldc;
  switch (tail) {
    case 3:
      return half_panel_range<3>(a, lda, packed, K, beta, c, ldc, N, h_begin, h_end);
    case 2:
      return half_panel_range<2>(a, lda, packed, K, beta, c, ldc, N, h_begin, h_end);
    case 1:
      return tile<1, P>(a, lda, packed, K, beta, c, ldc, N, 0, p0);
    default:
      return;
  }
}
#else
// Rows of A in groups of 4 (then 3, 2, 1), panels in groups of P.
template <int P, typename W>
void rows(const float* A, int64_t lda, const W* packed, int64_t K, float beta, float* C,
          int64_t ldc, int64_t N, int64_t M, int64_t p0) {
  int64_t m0 = 0;
  for (; m0 + 4 <= M; m0 += 4) tile<4, P>(A, lda, packed, K, beta, C, ldc, N, m0, p0);
  switch (M - m0) {
    case 3:
      tile<3, P>(A, lda, packed, K, beta, C, ldc, N, m0, p0);
      break;
    case 2:
      tile<2, P>(A, lda, packed, K, beta, C, ldc, N, m0, p0);
      break;
    case 1:
      tile<1, P>(A, lda, packed, K, beta, C, ldc, N, m0, p0);
      break;
    default:
      break;
  }
}
#endif

template <typename W>
void packed_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const W* packed,
                 float beta, float* C, int64_t ldc) {
#if defined(RETNET_PACKED_AVX2)
  switch (M) {
    case 2:
      return few_rows_gemm<2>(A, lda, packed, K, beta, C, ldc, N);
    case 3:
      return few_rows_gemm<3>(A, lda, packed, K, beta, C, ldc, N);
    case 4:
      return few_rows_gemm<4>(A, lda, packed, K, beta, C, ldc, N);
    default:
      break;
  }
#endif
  const int64_t panels = packed_panels(N);
  const int64_t tasks = (panels + kPanelsPerTask - 1) / kPanelsPerTask;
  // Threads only when the product is worth a fork (below ~32k multiply-adds one thread wins).
  const bool parallel = M * N * K >= (1 << 15) && tasks > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t p0 = t * kPanelsPerTask;
    switch (std::min<int64_t>(kPanelsPerTask, panels - p0)) {
      case 4:
        rows<4>(A, lda, packed, K, beta, C, ldc, N, M, p0);
        break;
      case 3:
        rows<3>(A, lda, packed, K, beta, C, ldc, N, M, p0);
        break;
      case 2:
        rows<2>(A, lda, packed, K, beta, C, ldc, N, M, p0);
        break;
      default:
        rows<1>(A, lda, packed, K, beta, C, ldc, N, M, p0);
        break;
    }
  }
}

}  // namespace

void packed_rows_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                     const float* packed, float beta, float* C, int64_t ldc) {
  packed_gemm(M, N, K, A, lda, packed, beta, C, ldc);
}
void packed_rows_f16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                     const uint16_t* packed, float beta, float* C, int64_t ldc) {
  packed_gemm(M, N, K, A, lda, packed, beta, C, ldc);
}
void packed_rows_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const BFloat16* packed, float beta, float* C, int64_t ldc) {
  packed_gemm(M, N, K, A, lda, packed, beta, C, ldc);
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
