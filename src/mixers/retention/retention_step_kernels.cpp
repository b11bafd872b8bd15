// One token of retention's recurrent step (retention_step_kernels.h), compiled once per
// instruction-set level (retnet/core/isa_kernels.h). Two orders over a head's state, both summing
// each aug[j] over i in order:
// - a small state (the cache holds it between steps) goes by groups of columns: their sums stay
//   in registers over the Dk rows, so a row costs one load and one store of S per column instead
//   of also loading and storing aug (such a step is bound by these stores);
// - a large one (it comes from memory at every step) goes row by row, aug in L1: one sequential
//   stream the hardware prefetcher follows, where a group of columns is Dk strided runs it does
//   not (docs/design-notes.md#recurrent-retention-step).
#ifndef RETNET_ISA_NS
#error "compiled once per level by CMake's retnet_isa_kernels, which defines RETNET_ISA_NS"
#endif
#include "retention_step_kernels.h"

#include <algorithm>

namespace retnet {
namespace RETNET_ISA_NS {
namespace {

constexpr int64_t kColumns = 32;

// S = g S + k [v, 1]^T and aug = q^T S, row by row.
void by_rows(float* S, int64_t W, int64_t Dk, float g, const float* q, const float* k,
             const float* vaug, float* aug) {
  std::fill(aug, aug + W, 0.f);
  for (int64_t i = 0; i < Dk; ++i) {
    float* s = S + i * W;
    const float ki = k[i], qi = q[i];
#pragma omp simd
    for (int64_t j = 0; j < W; ++j) {
      const float sj = g * s[j] + ki * vaug[j];
      s[j] = sj;
      aug[j] += qi * sj;
    }
  }
}

// S[:, j0 : j0 + n] = g S + k [v, 1]^T and aug[j0 : j0 + n] = q^T S for those columns. Each row
// visited also prefetches the next `pf.step` bytes of pf (none past pf.end: they may be a state
// another core is updating).
template <int64_t n>
void columns(float* S, int64_t W, int64_t Dk, float g, const float* q, const float* k,
             const float* vaug, float* aug, StatePrefetch& pf) {
  float v[n], a[n] = {};
  for (int64_t j = 0; j < n; ++j) v[j] = vaug[j];
  const char* line = pf.begin;
  for (int64_t i = 0; i < Dk; ++i) {
    float* s = S + i * W;
    const float ki = k[i], qi = q[i];
    for (int64_t b = 0; b < pf.step && line < pf.end; b += 64, line += 64)
      __builtin_prefetch(line, 0, 3);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float sj = g * s[j] + ki * v[j];
      s[j] = sj;
      a[j] += qi * sj;
    }
  }
  for (int64_t j = 0; j < n; ++j) aug[j] = a[j];
  pf.begin = line;
}

}  // namespace

void retention_token_step(float* S, int64_t W, int64_t Dk, float g, const float* q,
                          const float* k, const float* vaug, float* aug, bool rows,
                          StatePrefetch& prefetch) {
  if (rows) {
    by_rows(S, W, Dk, g, q, k, vaug, aug);
    return;
  }
  StatePrefetch none;
  int64_t j0 = 0;
  for (; j0 + kColumns <= W; j0 += kColumns)
    columns<kColumns>(S + j0, W, Dk, g, q, k, vaug + j0, aug + j0, prefetch);
  for (; j0 + 8 <= W; j0 += 8) columns<8>(S + j0, W, Dk, g, q, k, vaug + j0, aug + j0, none);
  for (; j0 < W; ++j0) columns<1>(S + j0, W, Dk, g, q, k, vaug + j0, aug + j0, none);
}

}  // namespace RETNET_ISA_NS
}  // namespace retnet
