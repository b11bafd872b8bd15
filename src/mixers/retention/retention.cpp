// Retention in four forms; see src/include/retnet/mixers/retention.h for the definition they share.
#include "retnet/mixers/retention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "../shared/head_loop.h"
#include "retention_form_kernels.h"
#include "retention_step_kernels.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"

namespace retnet {
namespace {

// The scan form keeps one [Dk, Dv+1] element per token of a tile; tiles are sized so that all
// concurrently scanned tiles fit this many floats (256 MiB).
constexpr size_t kScanBudgetFloats = size_t{64} << 20;

// Per-(sequence, head) pointers into the strided views.
struct HeadBlock : detail::HeadRows {
  float* state;  // [Dk, Dv+1]
  float* stats;  // per token (alpha, beta) for the backward pass, stride H * 2; or nullptr
  int64_t ld_stats;
  double gamma;
  bool normalize;  // RetentionArgs::normalize_scores
  int64_t pos0;
};

struct Dims {
  int64_t B, T, H, Dk, Dv;
};

Dims dims_of(const RetentionArgs& a) {
  Dims d{a.q.shape[0], a.q.shape[1], a.q.shape[2], a.q.shape[3], a.v.shape[3]};
  auto same = [&](const TensorView& t, int64_t last) {
    return detail::is_head_view(t, d.B, d.T, d.H, last);
  };
  RETNET_CHECK(same(a.q, d.Dk) && same(a.k, d.Dk) && same(a.v, d.Dv) && same(a.out, d.Dv),
               "retention: q, k must be [B, T, H, Dk] and v, out [B, T, H, Dv] with unit stride "
               "in the last dim");
  RETNET_CHECK(a.gammas != nullptr, "retention: decay per head is missing");
  return d;
}

HeadBlock head_block(const RetentionArgs& a, const Dims& d, int64_t b, int64_t h) {
  return {detail::head_rows(a.q, a.k, a.v, a.out, b, h),
          a.state ? a.state + sequence_row(a.rows, b) * a.state_stride + h * retention_state_floats_per_head(d.Dk, d.Dv)
                  : nullptr,
          a.row_stats ? a.row_stats + (b * d.T * d.H + h) * 2 : nullptr,
          d.H * 2,
          a.gammas[h],
          a.normalize_scores,
          a.positions ? a.positions[b] : 0};
}

// gp[i] = gamma^i for i in [0, n): formed as exp(i log gamma) in double, so it underflows to 0 for
// long distances and never overflows.
void decay_powers(double gamma, int64_t n, float* gp) {
  double lg = std::log(gamma);
  for (int64_t i = 0; i < n; ++i) gp[i] = static_cast<float>(std::exp(static_cast<double>(i) * lg));
}

// The last normalisation step: out = A[:Dv] / sqrt(S_n) / max(|A[Dv]| / sqrt(S_n), 1).
// stats (if given) receives what the backward pass needs: alpha = 1 / (sqrt(S_n) c_n), the scale
// applied, and beta = d out / d A[Dv] per unit of (d out . out): -sign(r) / |r| where the clamp is
// active, else 0.
// Without the normalisations (normalize_scores false) out = A[:Dv]: alpha = 1, beta = 0.
inline void normalise_row(const float* aug, float row_sum, float* out, int64_t Dv,
                          const HeadBlock& hb, int64_t n, float* stats) {
  float scale = 1.f, beta = 0.f;
  if (hb.normalize) {
    double inv_sqrt_s = 1.0 / std::sqrt(retention_decay_sum(hb.gamma, n));
    double r = static_cast<double>(row_sum);
    double c = std::max(std::fabs(r) * inv_sqrt_s, 1.0);
    scale = static_cast<float>(inv_sqrt_s / c);
    beta = std::fabs(r) * inv_sqrt_s > 1.0 ? static_cast<float>(-1.0 / r) : 0.f;
  }
  if (stats) {
    stats[0] = scale;
    stats[1] = beta;
  }
#pragma omp simd
  for (int64_t j = 0; j < Dv; ++j) out[j] = aug[j] * scale;
}

// Runs fn(head_block, scratch) for all B*H heads (see detail::for_each_head).
template <typename Fn>
void for_each_head(const RetentionArgs& a, const Dims& d, Arena& arena, size_t scratch_per_head,
                   Fn fn) {
  detail::for_each_head(d.B, d.H, arena, scratch_per_head,
                        [&](int64_t b, int64_t h, float* s) { fn(head_block(a, d, b, h), s); });
}

// ---- parallel form: the T x T score matrix of each head, masked by the decay ------------------
void parallel_head(const HeadBlock& hb, const Dims& d, float* scratch) {
  const int64_t T = d.T, Dv = d.Dv;
  float* P = scratch;     // [T, T]
  float* gp = P + T * T;  // [T]
  float* rows = gp + T;   // [T] row sums
  decay_powers(hb.gamma, T, gp);
  sgemm(Trans::No, Trans::Yes, T, T, d.Dk, 1.f, hb.q, hb.ldq, hb.k, hb.ldk, 0.f, P, T);
  static const auto decay_mask = RETNET_ISA_VARIANT(kernel_isa(), retention_decay_mask);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && T >= 256)
  for (int64_t n = 0; n < T; ++n) decay_mask(P, T, n, n + 1, T, gp, rows);
  sgemm(Trans::No, Trans::No, T, Dv, T, 1.f, P, T, hb.v, hb.ldv, 0.f, hb.out, hb.ldo);
  for (int64_t n = 0; n < T; ++n)
    normalise_row(hb.out + n * hb.ldo, rows[n], hb.out + n * hb.ldo, Dv, hb, n,
                  hb.stats ? hb.stats + n * hb.ld_stats : nullptr);
}

// ---- recurrent form: one token at a time, S = gamma S + k [v, 1]^T, A = q^T S ------------------
// The step's loops are retention_token_step (retention_step_kernels.cpp, one per ISA level); a
// state of kRowMajorStateBytes or more goes row by row, a smaller one by groups of columns.
constexpr int64_t kRecurrentColumns = 32;  // the widest column group of retention_token_step
constexpr int64_t kRowMajorStateBytes = int64_t{256} << 10;

// `next_state`: the state this thread updates after this head, or null (never one another core is
// updating: the prefetch would pull its lines away from that core). Batched decoding keeps
// B x layers x H states (516 KiB per sequence for the default model) that the weights' stream
// evicts between steps: this head's last token pulls the next head's state in while it computes,
// instead of that head stalling on it (docs/design-notes.md#recurrent-retention-step).
void recurrent_head(const HeadBlock& hb, const Dims& d, float* scratch, const float* next_state) {
  const int64_t Dk = d.Dk, Dv = d.Dv, W = Dv + 1;
  float* vaug = scratch;     // [Dv+1]
  float* aug = scratch + W;  // [Dv+1]
  const float g = static_cast<float>(hb.gamma);
  float* S = hb.state;
  // The wide column groups visit Dk rows each: spread the next state's bytes over those visits.
  const int64_t visits = W / kRecurrentColumns * Dk;
  const int64_t state_bytes = Dk * W * static_cast<int64_t>(sizeof(float));
  const bool by_rows = state_bytes >= kRowMajorStateBytes;
  static const auto token_step = RETNET_ISA_VARIANT(kernel_isa(), retention_token_step);
  StatePrefetch none, next;
  // Row by row, the next head's state follows in the same stream: no prefetch.
  if (next_state && visits && !by_rows) {
    next.begin = reinterpret_cast<const char*>(next_state);
    next.end = next.begin + state_bytes;
    next.step = (state_bytes + 64 * visits - 1) / (64 * visits) * 64;
  }
  for (int64_t t = 0; t < d.T; ++t) {
    const float* q = hb.q + t * hb.ldq;
    const float* k = hb.k + t * hb.ldk;
    StatePrefetch& pf = t + 1 == d.T ? next : none;
    std::memcpy(vaug, hb.v + t * hb.ldv, Dv * sizeof(float));
    vaug[Dv] = 1.f;
    token_step(S, W, Dk, g, q, k, vaug, aug, by_rows, pf);
    normalise_row(aug, aug[Dv], hb.out + t * hb.ldo, Dv, hb, hb.pos0 + t,
                  hb.stats ? hb.stats + t * hb.ld_stats : nullptr);
  }
}

// ---- chunkwise form: inside a chunk like the parallel form, across chunks through the state ----
size_t chunkwise_scratch(int64_t C, int64_t Dk, int64_t Dv) {
  return C * C + 2 * C * (Dv + 1) + 2 * C * Dk + (C + 1);
}

void chunkwise_head(const HeadBlock& hb, const Dims& d, int64_t C, float* scratch) {
  const int64_t Dk = d.Dk, Dv = d.Dv, W = Dv + 1;
  float* P = scratch;         // [C, C]
  float* vaug = P + C * C;    // [C, Dv+1]
  float* aug = vaug + C * W;  // [C, Dv+1]
  float* qd = aug + C * W;    // [C, Dk] queries times gamma^(j+1)
  float* kd = qd + C * Dk;    // [C, Dk] keys times gamma^(L-1-i)
  float* gp = kd + C * Dk;    // [C+1]
  decay_powers(hb.gamma, C + 1, gp);
  float* S = hb.state;  // [Dk, Dv+1]
  static const auto decay_mask = RETNET_ISA_VARIANT(kernel_isa(), retention_decay_mask);
  static const auto scale_rows = RETNET_ISA_VARIANT(kernel_isa(), retention_scale_rows);
  for (int64_t t0 = 0; t0 < d.T; t0 += C) {
    const int64_t L = std::min(C, d.T - t0);  // the last chunk may be short: no padding
    const float* q = hb.q + t0 * hb.ldq;
    const float* k = hb.k + t0 * hb.ldk;
    for (int64_t i = 0; i < L; ++i) {
      std::memcpy(vaug + i * W, hb.v + (t0 + i) * hb.ldv, Dv * sizeof(float));
      vaug[i * W + Dv] = 1.f;
    }
    // Inside the chunk: decayed scores times [v, 1].
    sgemm(Trans::No, Trans::Yes, L, L, Dk, 1.f, q, hb.ldq, k, hb.ldk, 0.f, P, L);
    decay_mask(P, L, 0, L, L, gp, nullptr);
    sgemm(Trans::No, Trans::No, L, W, L, 1.f, P, L, vaug, W, 0.f, aug, W);
    // From earlier chunks: the state, decayed to each position of the chunk.
    scale_rows(q, hb.ldq, qd, Dk, L, Dk, gp + 1, 1);
    sgemm(Trans::No, Trans::No, L, W, Dk, 1.f, qd, Dk, S, W, 1.f, aug, W);
    // The state after the chunk: S = gamma^L S + sum_i gamma^(L-1-i) k_i [v_i, 1]^T.
    scale_rows(k, hb.ldk, kd, Dk, L, Dk, gp + L - 1, -1);
    sgemm(Trans::Yes, Trans::No, Dk, W, L, 1.f, kd, Dk, vaug, W, gp[L], S, W);
    for (int64_t j = 0; j < L; ++j)
      normalise_row(aug + j * W, aug[j * W + Dv], hb.out + (t0 + j) * hb.ldo, Dv, hb,
                    hb.pos0 + t0 + j, hb.stats ? hb.stats + (t0 + j) * hb.ld_stats : nullptr);
  }
}

// ---- scan form: a parallel associative scan of (x, f) pairs, (xa, fa) + (xb, fb) = (fb xa + xb,
// fa fb), over the per-token elements x_t = k_t [v_t, 1]^T, f_t = gamma --------------------------
int64_t scan_tile_for(int64_t tile, int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv) {
  if (tile > 0) return std::min(tile, std::max<int64_t>(T, 1));
  int64_t slots = std::min<int64_t>(omp_get_max_threads(), B * H);
  int64_t per_token = Dk * (Dv + 1);
  int64_t fit = static_cast<int64_t>(kScanBudgetFloats) / std::max<int64_t>(slots * per_token, 1);
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(T, 1));
}

size_t scan_scratch(int64_t tile, int64_t Dk, int64_t Dv) {
  return tile * Dk * (Dv + 1) + tile + (Dv + 1);
}

void scan_head(const HeadBlock& hb, const Dims& d, int64_t tile, float* scratch) {
  const int64_t Dk = d.Dk, Dv = d.Dv, W = Dv + 1, E = Dk * W;
  float* x = scratch;       // [tile, Dk, Dv+1]
  float* f = x + tile * E;  // [tile]
  float* aug = f + tile;    // [Dv+1]
  float* carry = hb.state;  // the prefix before the tile, [Dk, Dv+1]
  const bool inner_parallel = !omp_in_parallel();
  static const auto scale_add = RETNET_ISA_VARIANT(kernel_isa(), retention_scale_add);
  static const auto read_state = RETNET_ISA_VARIANT(kernel_isa(), retention_read_state);
  // x[i] = f[i] x[j] + x[i], f[i] = f[j] f[i]: element j's span precedes element i's.
  auto combine = [&](int64_t j, int64_t i) {
    scale_add(x + i * E, x + j * E, f[i], E);
    f[i] *= f[j];
  };
  for (int64_t t0 = 0; t0 < d.T; t0 += tile) {
    const int64_t L = std::min(tile, d.T - t0);
#pragma omp parallel for schedule(static) if (inner_parallel && L * E > 65536)
    for (int64_t t = 0; t < L; ++t) {
      const float* k = hb.k + (t0 + t) * hb.ldk;
      const float* v = hb.v + (t0 + t) * hb.ldv;
      float* xt = x + t * E;
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t j = 0; j < Dv; ++j) xt[i * W + j] = k[i] * v[j];
        xt[i * W + Dv] = k[i];
      }
      f[t] = static_cast<float>(hb.gamma);
    }
    // Inclusive scan, Brent-Kung: an up-sweep builds the sums of aligned blocks of 2d elements, a
    // down-sweep completes every prefix. Each level's combines are independent.
    int64_t d_top = 1;
    for (int64_t s = 1; 2 * s <= L; s *= 2) {
#pragma omp parallel for schedule(static) if (inner_parallel && (L / (2 * s)) * E > 65536)
      for (int64_t i = 2 * s - 1; i < L; i += 2 * s) combine(i - s, i);
      d_top = s;
    }
    for (int64_t s = d_top; s >= 1; s /= 2) {
#pragma omp parallel for schedule(static) if (inner_parallel && (L / (2 * s)) * E > 65536)
      for (int64_t i = 3 * s - 1; i < L; i += 2 * s) combine(i - s, i);
    }
    // Prepend the carried prefix (carry + x_t), read each state with its query, normalise.
#pragma omp parallel for schedule(static) if (inner_parallel && L * E > 65536)
    for (int64_t t = 0; t < L; ++t) scale_add(x + t * E, carry, f[t], E);
    for (int64_t t = 0; t < L; ++t) {
      read_state(x + t * E, W, Dk, hb.q + (t0 + t) * hb.ldq, aug);
      normalise_row(aug, aug[Dv], hb.out + (t0 + t) * hb.ldo, Dv, hb, hb.pos0 + t0 + t,
                    hb.stats ? hb.stats + (t0 + t) * hb.ld_stats : nullptr);
    }
    std::memcpy(carry, x + (L - 1) * E, E * sizeof(float));
  }
}

}  // namespace

double retention_decay_sum(double gamma, int64_t n) {
  // (1 - gamma^(n+1)) / (1 - gamma), with expm1 so that it stays accurate for gamma near 1.
  return -std::expm1(static_cast<double>(n + 1) * std::log(gamma)) / (1.0 - gamma);
}

size_t retention_workspace_floats(Form form, int64_t B, int64_t T, int64_t H, int64_t Dk,
                                  int64_t Dv, int64_t chunk, int64_t scan_tile) {
  size_t per_head = 1;
  switch (form) {
    case Form::Parallel:
      per_head = T * T + 2 * T;
      break;
    case Form::Recurrent:
      per_head = 2 * (Dv + 1);
      break;
    case Form::Chunkwise:
      per_head = chunkwise_scratch(std::min(chunk, T), Dk, Dv);
      break;
    case Form::Scan:
      per_head = scan_scratch(scan_tile_for(scan_tile, B, T, H, Dk, Dv), Dk, Dv);
      break;
  }
  return detail::head_loop_footprint_bound(per_head);
}

void retention_forward(Form form, const RetentionArgs& a, Arena& arena) {
  const Dims d = dims_of(a);
  if (d.T == 0 || d.B == 0) return;
  for (int64_t h = 0; h < d.H; ++h)
    RETNET_CHECK(a.gammas[h] > 0.0 && a.gammas[h] < 1.0,
                 "retention: decay {} of head {} is not in "
                 "(0, 1)",
                 a.gammas[h], h);
  if (form == Form::Parallel) {
    for (int64_t b = 0; a.positions && b < d.B; ++b)
      RETNET_CHECK(a.positions[b] == 0, "the parallel form starts at position 0, got {}",
                   a.positions[b]);
    for_each_head(a, d, arena, d.T * d.T + 2 * d.T,
                  [&](const HeadBlock& hb, float* s) { parallel_head(hb, d, s); });
    return;
  }
  RETNET_CHECK(a.state != nullptr, "the {} form needs a state buffer", form_name(form));
  switch (form) {
    case Form::Recurrent:
      detail::for_each_head_in_order(
          d.B, d.H, arena, 2 * (d.Dv + 1), [&](int64_t b, int64_t h, float* s, bool next_is_mine) {
            // Task t + 1 is (b, h + 1), or (b + 1, 0) after a sequence's last head.
            const float* next = !next_is_mine ? nullptr
                                : h + 1 < d.H ? head_block(a, d, b, h + 1).state
                                              : head_block(a, d, b + 1, 0).state;
            recurrent_head(head_block(a, d, b, h), d, s, next);
          });
      break;
    case Form::Chunkwise: {
      RETNET_CHECK(a.chunk >= 1, "chunk size must be at least 1, got {}", a.chunk);
      int64_t C = std::min(a.chunk, d.T);
      for_each_head(a, d, arena, chunkwise_scratch(C, d.Dk, d.Dv),
                    [&](const HeadBlock& hb, float* s) { chunkwise_head(hb, d, C, s); });
      break;
    }
    case Form::Scan: {
      int64_t tile = scan_tile_for(a.scan_tile, d.B, d.T, d.H, d.Dk, d.Dv);
      for_each_head(a, d, arena, scan_scratch(tile, d.Dk, d.Dv),
                    [&](const HeadBlock& hb, float* s) { scan_head(hb, d, tile, s); });
      break;
    }
    default:
      break;
  }
}

void retention_reference(const float* q, const float* k, const float* v, double* out, int64_t T,
                         int64_t Dk, int64_t Dv, double gamma, bool normalize_scores) {
  const std::vector<double> qd(q, q + T * Dk), kd(k, k + T * Dk), vd(v, v + T * Dv);
  std::vector<double> state(Dk * (Dv + 1), 0.0);
  retention_reference(qd.data(), kd.data(), vd.data(), out, T, Dk, Dv, gamma, normalize_scores,
                      state.data(), 0);
}

void retention_reference(const double* q, const double* k, const double* v, double* out,
                         int64_t T, int64_t Dk, int64_t Dv, double gamma, bool normalize_scores,
                         double* S, int64_t position) {
  std::vector<double> aug(Dv + 1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < Dk; ++i)
      for (int64_t j = 0; j <= Dv; ++j)
        S[i * (Dv + 1) + j] =
            gamma * S[i * (Dv + 1) + j] + k[t * Dk + i] * (j < Dv ? v[t * Dv + j] : 1.0);
    std::fill(aug.begin(), aug.end(), 0.0);
    for (int64_t i = 0; i < Dk; ++i)
      for (int64_t j = 0; j <= Dv; ++j) aug[j] += q[t * Dk + i] * S[i * (Dv + 1) + j];
    double inv =
        normalize_scores ? 1.0 / std::sqrt(retention_decay_sum(gamma, position + t)) : 1.0;
    double c = normalize_scores ? std::max(std::fabs(aug[Dv]) * inv, 1.0) : 1.0;
    for (int64_t j = 0; j < Dv; ++j) out[t * Dv + j] = aug[j] * inv / c;
  }
}

}  // namespace retnet
