// Every level this CPU runs of the per-level row kernels (norms, gated activations, rotations, the
// optimizer's passes, attention's softmax rows, feature maps, decay attention's lanes, retention's
// recurrent step, the loops of its other forms, linear attention's step, AFT's channel loops,
// attention's decode step, decay attention's backward) against double references, at small sizes whose
// lengths are off the vector widths, so each level's vector body and tail are both exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../../src/mixers/aft/aft_rows.h"
#include "../../src/mixers/attention/attention_decode_kernels.h"
#include "../../src/mixers/attention/attention_row_kernels.h"
#include "../../src/mixers/retention/retention_form_kernels.h"
#include "../../src/mixers/retention/retention_step_kernels.h"
#include "../../src/mixers/shared/decay_backward_lanes.h"
#include "../../src/mixers/shared/decay_lanes.h"
#include "../../src/mixers/shared/feature_map_rows.h"
#include "../../src/mixers/shared/linear_attention_step.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/mixers/decay_attention.h"
#include "retnet/ops/ops_isa.h"
#include "test_helpers.h"

namespace isa_ops_test {

using retnet::Isa;

std::vector<float> uniform(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<Isa> cpu_levels() {
  std::vector<Isa> out;
  for (Isa level : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (level <= retnet::cpu_isa()) out.push_back(level);
  return out;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace isa_ops_test

namespace iot = isa_ops_test;
using retnet::Isa;

TEST(IsaKernels, RmsnormEveryLevelAgreesWithTheReference) {
  const int64_t N = 3, D = 37, ld = 40;
  const float eps = 1e-6f;
  const std::vector<float> x = iot::uniform(N * ld, 1), w = iot::uniform(D, 2, 0.5f, 1.5f);
  const std::vector<float> dy = iot::uniform(N * ld, 3), dx0 = iot::uniform(N * ld, 4);
  // Double references: y, rstd, dx (accumulated onto dx0) and dw (onto zero).
  std::vector<double> y_ref(N * D), r_ref(N), dx_ref(N * D), dw_ref(D, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0, dot = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[n * ld + i]) * x[n * ld + i];
    const double r = 1.0 / std::sqrt(ss / D + eps);
    r_ref[n] = r;
    for (int64_t i = 0; i < D; ++i) {
      y_ref[n * D + i] = x[n * ld + i] * r * w[i];
      dot += double(w[i]) * dy[n * ld + i] * x[n * ld + i];
    }
    for (int64_t i = 0; i < D; ++i) {
      dx_ref[n * D + i] = dx0[n * ld + i] + r * w[i] * dy[n * ld + i] - x[n * ld + i] * r * r * r / D * dot;
      dw_ref[i] += double(dy[n * ld + i]) * x[n * ld + i] * r;
    }
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> y(N * D), rstd(N), dx = dx0, dw(D, 0.f);
    RETNET_ISA_VARIANT(level, rmsnorm_forward)(x.data(), ld, w.data(), y.data(), D, rstd.data(), N,
                                               D, eps);
    EXPECT_TRUE(retnet::test::close(y, y_ref, 1e-6));
    EXPECT_TRUE(retnet::test::close(rstd, r_ref, 1e-6));
    RETNET_ISA_VARIANT(level, rmsnorm_backward)(x.data(), ld, w.data(), rstd.data(), dy.data(), ld,
                                                dx.data(), ld, dw.data(), N, D);
    std::vector<float> dx_rows(N * D);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < D; ++i) dx_rows[n * D + i] = dx[n * ld + i];
    EXPECT_TRUE(retnet::test::close(dx_rows, dx_ref, 1e-5));
    EXPECT_TRUE(retnet::test::close(dw, dw_ref, 1e-5));
  }
}

TEST(IsaKernels, GatedActivationsEveryLevelAgreeWithTheReference) {
  const int64_t N = 2, D = 45;
  const std::vector<float> a = iot::uniform(N * D, 5, -6.f, 6.f), b = iot::uniform(N * D, 6);
  const std::vector<float> g = iot::uniform(N * D, 7);
  for (retnet::Activation act : {retnet::Activation::Gelu, retnet::Activation::Swish}) {
    const bool is_gelu = act == retnet::Activation::Gelu;
    std::vector<double> out_ref(N * D), da_ref(N * D), db_ref(N * D);
    for (int64_t i = 0; i < N * D; ++i) {
      const double x = a[i], s = iot::sigmoid(x);
      const double f = is_gelu ? iot::gelu(x) : x * s;
      const double df = is_gelu ? iot::gelu_grad(x) : s * (1.0 + x * (1.0 - s));
      out_ref[i] = f * b[i];
      da_ref[i] = df * b[i] * g[i];
      db_ref[i] = f * g[i];
    }
    for (Isa level : iot::cpu_levels()) {
      SCOPED_TRACE(testing::Message() << retnet::isa_name(level) << (is_gelu ? " gelu" : " swish"));
      std::vector<float> out(N * D), da(N * D), db(N * D);
      RETNET_ISA_VARIANT(level, gated_activation_forward)(act, a.data(), D, b.data(), D,
                                                          out.data(), D, N, D);
      EXPECT_TRUE(retnet::test::close(out, out_ref, 1e-6));
      RETNET_ISA_VARIANT(level, gated_activation_backward)(act, a.data(), D, b.data(), D, g.data(),
                                                           D, da.data(), D, db.data(), D, N, D);
      EXPECT_TRUE(retnet::test::close(da, da_ref, 1e-6));
      EXPECT_TRUE(retnet::test::close(db, db_ref, 1e-6));
    }
  }
}

TEST(IsaKernels, RotationEveryLevelAgreesWithTheReference) {
  // Two sequences with tables of their own (sequence_stride T), 3 heads of 10 dims (5 pairs).
  const int64_t B = 2, T = 3, H = 3, Dk = 10, half = Dk / 2, ld = H * Dk + 2;
  const std::vector<float> x0 = iot::uniform(B * T * ld, 8);
  std::vector<float> table(B * T * 2 * half);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = 0.3 * double(r + 1) * double(i + 1);
      table[r * 2 * half + i] = static_cast<float>(std::cos(angle));
      table[r * 2 * half + half + i] = static_cast<float>(std::sin(angle));
    }
  for (auto pairs : {retnet::RotationPairs::Interleaved, retnet::RotationPairs::HalfSplit})
    for (auto direction : {retnet::RotationDirection::Forward, retnet::RotationDirection::Inverse}) {
      const bool interleaved = pairs == retnet::RotationPairs::Interleaved;
      const int64_t step = interleaved ? 2 : 1, offset = interleaved ? 1 : half;
      const double sign = direction == retnet::RotationDirection::Forward ? 1.0 : -1.0;
      std::vector<double> want(x0.begin(), x0.end());
      for (int64_t r = 0; r < B * T; ++r)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < half; ++i) {
            const int64_t p = r * ld + h * Dk + step * i, q = p + offset;
            const double c = table[r * 2 * half + i], s = sign * table[r * 2 * half + half + i];
            want[p] = x0[p] * c - x0[q] * s;
            want[q] = x0[q] * c + x0[p] * s;
          }
      for (Isa level : iot::cpu_levels()) {
        SCOPED_TRACE(testing::Message() << retnet::isa_name(level) << " interleaved "
                                        << interleaved << " sign " << sign);
        std::vector<float> x = x0;
        RETNET_ISA_VARIANT(level, rotate_with_table)(x.data(), ld, B, T, H, Dk, table.data(), T,
                                                     direction, pairs);
        EXPECT_TRUE(retnet::test::close(x, want, 1e-6));
      }
    }
}

TEST(IsaKernels, OptimizerPassesEveryLevelAgreeWithTheReference) {
  const int64_t n = 53;
  const std::vector<float> p0 = iot::uniform(n, 9), m0 = iot::uniform(n, 10), g = iot::uniform(n, 12);
  const std::vector<float> v0 = iot::uniform(n, 11, 0.f, 0.1f);
  std::vector<uint8_t> decay(n);
  for (int64_t i = 0; i < n; ++i) decay[i] = i % 3 == 0;
  const float b1 = 0.9f, b2 = 0.95f, step_size = 0.01f, inv_sqrt_bc2 = 1.5f, eps = 1e-8f,
              rate = 0.001f;
  std::vector<double> p_ref(n), m_ref(n), v_ref(n), scaled_ref(n);
  double sum_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    m_ref[i] = double(b1) * m0[i] + (1.0 - b1) * g[i];
    v_ref[i] = double(b2) * v0[i] + (1.0 - b2) * g[i] * g[i];
    const double p = decay[i] ? p0[i] - double(rate) * p0[i] : p0[i];
    p_ref[i] = p - step_size * m_ref[i] / (std::sqrt(v_ref[i]) * inv_sqrt_bc2 + eps);
    sum_ref += double(g[i]) * g[i];
    scaled_ref[i] = 0.25 * g[i];
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> p = p0, m = m0, v = v0, scaled = g;
    RETNET_ISA_VARIANT(level, adamw_step)(p.data(), m.data(), v.data(), g.data(), decay.data(), n,
                                          b1, b2, step_size, inv_sqrt_bc2, eps, rate);
    EXPECT_TRUE(retnet::test::close(m, m_ref, 1e-6));
    EXPECT_TRUE(retnet::test::close(v, v_ref, 1e-6));
    EXPECT_TRUE(retnet::test::close(p, p_ref, 1e-6));
    const double sum = RETNET_ISA_VARIANT(level, sum_of_squares)(g.data(), n);
    EXPECT_TRUE(retnet::test::close(std::vector<double>{sum}, std::vector<double>{sum_ref}, 1e-12));
    RETNET_ISA_VARIANT(level, scale_in_place)(scaled.data(), n, 0.25f);
    EXPECT_TRUE(retnet::test::close(scaled, scaled_ref, 0.0));
  }
}

TEST(IsaKernels, AttentionRowsEveryLevelAgreeWithTheReference) {
  for (int64_t n : {1, 7, 16, 17, 40}) {
    const std::vector<float> x0 = iot::uniform(n, 13 + n, -30.f, 5.f);
    double top = -1e30;
    for (float x : x0) top = std::max(top, double(x));
    std::vector<double> want(n);
    double sum_ref = 0;
    for (int64_t j = 0; j < n; ++j) sum_ref += want[j] = std::exp(double(x0[j]) - top);
    for (Isa level : iot::cpu_levels()) {
      SCOPED_TRACE(testing::Message() << retnet::isa_name(level) << " n " << n);
      const float m = RETNET_ISA_VARIANT(level, attention_max_of)(x0.data(), n, -1e30f);
      EXPECT_EQ(m, static_cast<float>(top));
      // init above every element wins.
      EXPECT_EQ(RETNET_ISA_VARIANT(level, attention_max_of)(x0.data(), n, 6.f), 6.f);
      std::vector<float> x = x0;
      const float sum = RETNET_ISA_VARIANT(level, attention_exp_shifted_sum)(x.data(), n, m);
      EXPECT_TRUE(retnet::test::close(x, want, 1e-6));
      EXPECT_TRUE(retnet::test::close(std::vector<float>{sum}, std::vector<double>{sum_ref}, 1e-6));
    }
  }
}

TEST(IsaKernels, FeatureMapRowsEveryLevelAgreeWithTheReference) {
  const int64_t D = 45;
  const std::vector<float> x = iot::uniform(D, 20, -4.f, 4.f), d_phi = iot::uniform(D, 21);
  const std::vector<float> d_x0 = iot::uniform(D, 22);
  std::vector<double> phi_ref(D), d_x_ref(D), exp_ref(D);
  for (int64_t i = 0; i < D; ++i) {
    phi_ref[i] = x[i] > 0 ? x[i] + 1.0 : std::exp(double(x[i]));
    d_x_ref[i] = d_x0[i] + d_phi[i] * (x[i] > 0 ? 1.0 : phi_ref[i]);
    exp_ref[i] = std::exp(double(x[i]) - 3.0) * 0.5;
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> phi(D), d_x = d_x0, p = x;
    RETNET_ISA_VARIANT(level, elu_plus_one_row)(x.data(), phi.data(), D);
    EXPECT_TRUE(retnet::test::close(phi, phi_ref, 1e-6));
    RETNET_ISA_VARIANT(level, elu_plus_one_row_backward)(x.data(), phi.data(), d_phi.data(),
                                                         d_x.data(), D);
    EXPECT_TRUE(retnet::test::close(d_x, d_x_ref, 1e-6));
    RETNET_ISA_VARIANT(level, scaled_exp_row)(p.data(), D, 3.f, 0.5f);
    EXPECT_TRUE(retnet::test::close(p, exp_ref, 1e-6));
  }
}

// One block of 20 channels (fewer than a block's lanes: the padding lanes are exercised) from an
// empty state: the recurrent steps, and the pairwise form over two chunks (the first folded into
// the state the second starts from), against the double definition.
TEST(IsaKernels, DecayLanesEveryLevelAgreeWithTheReference) {
  const int64_t T = 9, C = 20, L1 = 4, kCb = retnet::kDecayChannelBlock;
  const std::vector<float> r = iot::uniform(T * C, 23), k = iot::uniform(T * C, 24);
  const std::vector<float> v = iot::uniform(T * C, 25), w = iot::uniform(C, 26, 0.1f, 1.f);
  const std::vector<float> u = iot::uniform(C, 27);
  std::vector<double> want(T * C);
  retnet::decay_attention_reference(r.data(), k.data(), v.data(), w.data(), u.data(), want.data(),
                                    T, C, nullptr);
  // Lanes: w, u, the state and the packed chunk rows padded with zeros to kCb.
  std::vector<float> wl(kCb, 0.f), ul(kCb, 0.f), K(T * kCb, 0.f), V(T * kCb, 0.f);
  for (int64_t c = 0; c < C; ++c) {
    wl[c] = w[c];
    ul[c] = u[c];
    for (int64_t t = 0; t < T; ++t) {
      K[t * kCb + c] = k[t * C + c];
      V[t * kCb + c] = v[t * C + c];
    }
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> out(T * C), a(kCb, 0.f), bs(kCb, 0.f), p(kCb, 0.f);
    const retnet::DecayRows rows{r.data(), C, out.data(), C, nullptr, nullptr, C, C};
    RETNET_ISA_VARIANT(level, decay_recurrent_steps)(rows, T, k.data(), C, v.data(), C, wl.data(),
                                                     ul.data(), a.data(), bs.data(), p.data());
    EXPECT_TRUE(retnet::test::close(out, want, 1e-5)) << "recurrent";
    std::fill(out.begin(), out.end(), 0.f);
    std::fill(a.begin(), a.end(), 0.f);
    std::fill(bs.begin(), bs.end(), 0.f);
    std::fill(p.begin(), p.end(), 0.f);
    const auto chunk = RETNET_ISA_VARIANT(level, decay_pairwise_chunk);
    chunk(rows, 0, L1, K.data(), V.data(), wl.data(), ul.data(), a.data(), bs.data(), p.data(),
          true);
    chunk(rows, L1, T - L1, K.data() + L1 * kCb, V.data() + L1 * kCb, wl.data(), ul.data(),
          a.data(), bs.data(), p.data(), false);
    EXPECT_TRUE(retnet::test::close(out, want, 1e-5)) << "pairwise";
  }
}

// Three tokens of retention's recurrent step on a head state of 7 rows of 45 columns (the widest
// column group, an 8-group and single columns), in both orders, against the double definition
// S = g S + k v^T, aug = q^T S.
TEST(IsaKernels, RetentionStepEveryLevelAgreesWithTheReference) {
  const int64_t Dk = 7, W = 45, T = 3;
  const float g = 0.9f;
  const std::vector<float> S0 = iot::uniform(Dk * W, 30), q = iot::uniform(T * Dk, 31),
                           k = iot::uniform(T * Dk, 32), v = iot::uniform(T * W, 33);
  std::vector<double> S_ref(S0.begin(), S0.end()), aug_ref(T * W, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < Dk; ++i)
      for (int64_t j = 0; j < W; ++j) {
        double& s = S_ref[i * W + j];
        s = g * s + double(k[t * Dk + i]) * v[t * W + j];
        aug_ref[t * W + j] += double(q[t * Dk + i]) * s;
      }
  for (Isa level : iot::cpu_levels())
    for (bool by_rows : {false, true}) {
      SCOPED_TRACE(std::string(retnet::isa_name(level)) + (by_rows ? ", by rows" : ", by columns"));
      std::vector<float> S = S0, aug(T * W);
      // Prefetching the state it updates changes nothing it computes.
      retnet::StatePrefetch pf{reinterpret_cast<const char*>(S.data()),
                               reinterpret_cast<const char*>(S.data() + S.size()), 64};
      for (int64_t t = 0; t < T; ++t)
        RETNET_ISA_VARIANT(level, retention_token_step)(S.data(), W, Dk, g, q.data() + t * Dk,
                                                        k.data() + t * Dk, v.data() + t * W,
                                                        aug.data() + t * W, by_rows, pf);
      EXPECT_TRUE(retnet::test::close(S, S_ref, 1e-5));
      EXPECT_TRUE(retnet::test::close(aug, aug_ref, 1e-5));
    }
}

// The loops of retention's parallel, chunkwise and scan forms: the decay mask of a causal score
// block (with and without row sums), row scaling (forwards, backwards, in place), the scan's
// combine and a state's read by its query, at lengths off the vector widths.
TEST(IsaKernels, RetentionFormLoopsEveryLevelAgreeWithTheReference) {
  const int64_t L = 37, ld = 48, W = 45, Dk = 7;
  const std::vector<float> P0 = iot::uniform(L * ld, 40), gp = iot::uniform(L + 1, 41, 0.1f, 1.f);
  const std::vector<float> src = iot::uniform(L * ld, 42), X = iot::uniform(Dk * W, 43);
  const std::vector<float> q = iot::uniform(Dk, 44), y0 = iot::uniform(Dk * W, 45);
  // Double references; rows [3, L) of P are masked, rows [0, 3) and the columns past L (not the
  // block's) stay as they are.
  std::vector<double> P_ref(P0.begin(), P0.end()), sums_ref(L, 0.0);
  for (int64_t n = 3; n < L; ++n)
    for (int64_t m = 0; m < L; ++m) {
      double& p = P_ref[n * ld + m];
      p = m <= n ? p * gp[n - m] : 0.0;
      sums_ref[n] += p;
    }
  std::vector<double> fwd_ref(L * W), back_ref(L * W), axpy_ref(Dk * W), aug_ref(W, 0.0);
  for (int64_t r = 0; r < L; ++r)
    for (int64_t c = 0; c < W; ++c) {
      fwd_ref[r * W + c] = double(src[r * ld + c]) * gp[r + 1];
      back_ref[r * W + c] = double(src[r * ld + c]) * gp[L - 1 - r];
    }
  for (int64_t e = 0; e < Dk * W; ++e) axpy_ref[e] = 0.7 * X[e] + y0[e];
  for (int64_t i = 0; i < Dk; ++i)
    for (int64_t j = 0; j < W; ++j) aug_ref[j] += double(q[i]) * X[i * W + j];
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> P = P0, sums(L, -1.f);
    RETNET_ISA_VARIANT(level, retention_decay_mask)(P.data(), ld, 3, L, L, gp.data(), sums.data());
    EXPECT_TRUE(retnet::test::close(P, P_ref, 1e-6));
    EXPECT_TRUE(retnet::test::close(std::vector<float>(sums.begin() + 3, sums.end()),
                                    std::vector<double>(sums_ref.begin() + 3, sums_ref.end()),
                                    1e-5));
    EXPECT_EQ(sums[0], -1.f);  // rows outside [n0, n1) keep their sums
    std::vector<float> Q = P0;
    RETNET_ISA_VARIANT(level, retention_decay_mask)(Q.data(), ld, 3, L, L, gp.data(), nullptr);
    EXPECT_EQ(Q, P);
    std::vector<float> fwd(L * W), back(L * ld);
    RETNET_ISA_VARIANT(level, retention_scale_rows)(src.data(), ld, fwd.data(), W, L, W,
                                                    gp.data() + 1, 1);
    EXPECT_TRUE(retnet::test::close(fwd, fwd_ref, 1e-6));
    back = src;  // in place
    RETNET_ISA_VARIANT(level, retention_scale_rows)(back.data(), ld, back.data(), ld, L, W,
                                                    gp.data() + L - 1, -1);
    std::vector<float> back_rows(L * W);
    for (int64_t r = 0; r < L; ++r)
      for (int64_t c = 0; c < W; ++c) back_rows[r * W + c] = back[r * ld + c];
    EXPECT_TRUE(retnet::test::close(back_rows, back_ref, 1e-6));
    std::vector<float> y = y0, aug(W, -1.f);
    RETNET_ISA_VARIANT(level, retention_scale_add)(y.data(), X.data(), 0.7f, Dk * W);
    EXPECT_TRUE(retnet::test::close(y, axpy_ref, 1e-6));
    RETNET_ISA_VARIANT(level, retention_read_state)(X.data(), W, Dk, q.data(), aug.data());
    EXPECT_TRUE(retnet::test::close(aug, aug_ref, 1e-5));
  }
}

// Three tokens of linear attention's recurrent step on a state of 5 rows of 37 columns, against
// S += k v^T, aug = q^T S.
TEST(IsaKernels, LinearAttentionStepEveryLevelAgreesWithTheReference) {
  const int64_t F = 5, W = 37, T = 3;
  const std::vector<float> S0 = iot::uniform(F * W, 50), q = iot::uniform(T * F, 51, 0.f, 1.f),
                           k = iot::uniform(T * F, 52, 0.f, 1.f), v = iot::uniform(T * W, 53);
  std::vector<double> S_ref(S0.begin(), S0.end()), aug_ref(T * W, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < F; ++i)
      for (int64_t j = 0; j < W; ++j) {
        double& s = S_ref[i * W + j];
        s += double(k[t * F + i]) * v[t * W + j];
        aug_ref[t * W + j] += double(q[t * F + i]) * s;
      }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> S = S0, aug(T * W);
    for (int64_t t = 0; t < T; ++t)
      RETNET_ISA_VARIANT(level, linear_attention_token_step)(S.data(), W, F, q.data() + t * F,
                                                             k.data() + t * F, v.data() + t * W,
                                                             aug.data() + t * W);
    EXPECT_TRUE(retnet::test::close(S, S_ref, 1e-5));
    EXPECT_TRUE(retnet::test::close(aug, aug_ref, 1e-5));
  }
}

// AFT's channel loops on 37 channels: 9 keys folded into a query at position 8 (bias of L = 4
// distances, the last one shared by the far keys) in two runs, the gated output, the merge of
// the two runs' partials, and the backward of that query row against the double gradients.
TEST(IsaKernels, AftRowsEveryLevelAgreeWithTheReference) {
  const int64_t C = 37, Tk = 9, L = 4, n = 8;
  const std::vector<float> k = iot::uniform(Tk * C, 60, -3.f, 3.f), v = iot::uniform(Tk * C, 61);
  const std::vector<float> q = iot::uniform(C, 62, -4.f, 4.f), bias = iot::uniform(L, 63);
  const std::vector<float> d_out = iot::uniform(C, 64);
  auto b_of = [&](int64_t m) { return double(bias[std::min(n - m, L - 1)]); };
  // Double references: the softmax over keys of e = bias + k, its ratio r = N / D, the gated
  // output sigmoid(q) r; gradients of sum(d_out * out): d_v[m] = p_m g, d_k[m] = p_m g (v_m - r),
  // d_bias[l] = the sum over c and keys at that distance of d_k, d_q = d_out r sigmoid'(q).
  std::vector<double> M_ref(C), den_ref(C, 0.0), ratio_ref(C, 0.0), out_ref(C), dq_ref(C);
  std::vector<double> dk_ref(Tk * C), dv_ref(Tk * C), dbias_ref(L, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double m = -INFINITY;
    for (int64_t j = 0; j < Tk; ++j) m = std::max(m, b_of(j) + k[j * C + c]);
    for (int64_t j = 0; j < Tk; ++j) {
      const double p = std::exp(b_of(j) + k[j * C + c] - m);
      den_ref[c] += p;
      ratio_ref[c] += p * v[j * C + c];
    }
    ratio_ref[c] /= den_ref[c];
    M_ref[c] = m;
    const double s = iot::sigmoid(q[c]), g = d_out[c] * s;
    out_ref[c] = s * ratio_ref[c];
    dq_ref[c] = 0.5 + d_out[c] * ratio_ref[c] * s * (1.0 - s);
    for (int64_t j = 0; j < Tk; ++j) {
      const double p = std::exp(b_of(j) + k[j * C + c] - m) / den_ref[c];
      dv_ref[j * C + c] = p * g;
      dk_ref[j * C + c] = p * g * (v[j * C + c] - ratio_ref[c]);
      dbias_ref[std::min(n - j, L - 1)] += dk_ref[j * C + c];
    }
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    // Two runs of keys, [0, 4) and [4, 9), as two decode tasks: partials [2][3, C].
    std::vector<float> partials(2 * 3 * C);
    for (int64_t s = 0; s < 2; ++s) {
      float* M = partials.data() + s * 3 * C;
      std::fill(M, M + C, -INFINITY);
      std::fill(M + C, M + 3 * C, 0.f);
      RETNET_ISA_VARIANT(level, aft_fold_keys)(k.data(), C, v.data(), C, s ? 4 : 0, s ? Tk : 4, n,
                                               bias.data(), L, M, M + C, M + 2 * C, C);
    }
    std::vector<float> merged(C);
    RETNET_ISA_VARIANT(level, aft_merge_partials)(partials.data(), 2, C, q.data(), merged.data());
    EXPECT_TRUE(retnet::test::close(merged, out_ref, 1e-5)) << "merged";
    // All keys in one run, then the gated ratio and the saved statistics of the forward.
    std::vector<float> M(C, -INFINITY), num(C, 0.f), den(C, 0.f), out(C), ratio(C);
    RETNET_ISA_VARIANT(level, aft_fold_keys)(k.data(), C, v.data(), C, 0, Tk, n, bias.data(), L,
                                             M.data(), num.data(), den.data(), C);
    RETNET_ISA_VARIANT(level, aft_gated_ratio)(q.data(), num.data(), den.data(), out.data(), C);
    EXPECT_TRUE(retnet::test::close(out, out_ref, 1e-5)) << "one run";
    EXPECT_TRUE(retnet::test::close(M, M_ref, 1e-6));
    EXPECT_TRUE(retnet::test::close(den, den_ref, 1e-5));
    for (int64_t c = 0; c < C; ++c) ratio[c] = num[c] / den[c];
    // The backward of that row from the saved statistics; keys [1, 9) (a key tile from 1).
    std::vector<float> dk(Tk * C, 0.f), dv(Tk * C, 0.f), g(C), inv_den(C), dq(C, 0.5f);
    std::vector<double> d_bias(L, 0.0);
    const retnet::AftBackwardRow row{q.data(), d_out.data(), M.data(), ratio.data(), den.data(),
                                     k.data(), v.data(), C, C, dk.data() + C, dv.data() + C, C};
    RETNET_ISA_VARIANT(level, aft_backward_row)(row, n, 1, Tk, bias.data(), L, g.data(),
                                                inv_den.data(), d_bias.data(), C);
    std::vector<double> dk_want = dk_ref, dv_want = dv_ref, dbias_want = dbias_ref;
    for (int64_t c = 0; c < C; ++c) {  // key 0 is outside the tile: its gradients stay 0
      dbias_want[std::min(n, L - 1)] -= dk_ref[c];
      dk_want[c] = dv_want[c] = 0.0;
    }
    EXPECT_TRUE(retnet::test::close(dk, dk_want, 1e-5)) << "d_k";
    EXPECT_TRUE(retnet::test::close(dv, dv_want, 1e-5)) << "d_v";
    EXPECT_TRUE(retnet::test::close(d_bias, dbias_want, 1e-5)) << "d_bias";
    RETNET_ISA_VARIANT(level, aft_query_grad_row)(q.data(), d_out.data(), ratio.data(), dq.data(),
                                                  C);
    EXPECT_TRUE(retnet::test::close(dq, dq_ref, 1e-5)) << "d_q";
  }
}

// Attention's decode step: 4 query heads on 2 kv heads (Dk 19, Dv 21) over 300 cached tokens (a
// full block of 256 and a tail), as two ranges whose partials are merged, against the double
// softmax.
TEST(IsaKernels, AttentionDecodeEveryLevelAgreesWithTheReference) {
  const retnet::AttentionDecodeShape d{4, 2, 19, 21};
  const int64_t T = 300, row = d.Hkv * (d.Dk + d.Dv), G = d.H / d.Hkv, ldq = 24;
  const std::vector<float> rows = iot::uniform(T * row, 70, -2.f, 2.f);
  const std::vector<float> q = iot::uniform(d.H * ldq, 71, -2.f, 2.f);
  std::vector<double> out_ref(d.H * d.Dv, 0.0);
  const double scale = 1.0 / std::sqrt(double(d.Dk));
  for (int64_t h = 0; h < d.H; ++h) {
    std::vector<double> s(T);
    double m = -INFINITY, sum = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      const float* key = rows.data() + t * row + (h / G) * d.Dk;
      double dot = 0.0;
      for (int64_t i = 0; i < d.Dk; ++i) dot += double(q[h * ldq + i]) * key[i];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    for (int64_t t = 0; t < T; ++t) sum += std::exp(s[t] - m);
    for (int64_t t = 0; t < T; ++t) {
      const float* value = rows.data() + t * row + d.Hkv * d.Dk + (h / G) * d.Dv;
      for (int64_t c = 0; c < d.Dv; ++c) out_ref[h * d.Dv + c] += std::exp(s[t] - m) / sum * value[c];
    }
  }
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    const int64_t per = d.H * (d.Dv + 2);
    std::vector<float> scores(d.H * retnet::kAttentionDecodeBlock), partials(2 * per);
    std::vector<float> out(d.H * d.Dv);
    RETNET_ISA_VARIANT(level, attention_decode_range)(q.data(), ldq, rows.data(), d, 0, 20,
                                                      scores.data(), partials.data());
    RETNET_ISA_VARIANT(level, attention_decode_range)(q.data(), ldq, rows.data(), d, 20, T,
                                                      scores.data(), partials.data() + per);
    for (int64_t h = 0; h < d.H; ++h)
      RETNET_ISA_VARIANT(level, attention_merge_partials)(partials.data(), 2, d, h,
                                                          out.data() + h * d.Dv);
    EXPECT_TRUE(retnet::test::close(out, out_ref, 1e-5));
    // The backward's row terms: each query row against a cached row's first 23 floats.
    std::vector<float> D(d.H);
    std::vector<double> D_ref(d.H, 0.0);
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t j = 0; j < 23; ++j) D_ref[h] += double(q[h * ldq + j]) * rows[h * row + j];
    RETNET_ISA_VARIANT(level, attention_row_dots)(q.data(), ldq, rows.data(), row, d.H, 23,
                                                  D.data());
    EXPECT_TRUE(retnet::test::close(D, D_ref, 1e-5));
  }
}

// Decay attention's backward over one sequence of 11 tokens and 5 channels (one block, chunks of
// 4: pairs inside and across chunks) against the double gradients of its definition
// (decay_backward_lanes.cpp): per channel, weights e^{x_nm} with x_nm = k_m - (n-1-m) w (m < n),
// u + k_n (m = n), pi_nm = e^{x_nm} / sum_m e^{x_nm}, wkv_n = sum_m pi_nm v_m, out_n =
// sigmoid(r_n) wkv_n.
TEST(IsaKernels, DecayBackwardEveryLevelAgreesWithTheReference) {
  const int64_t T = 11, C = 5;
  const std::vector<float> r = iot::uniform(T * C, 80), k = iot::uniform(T * C, 81, -2.f, 2.f);
  const std::vector<float> v = iot::uniform(T * C, 82), d_out = iot::uniform(T * C, 83);
  const std::vector<float> w = iot::uniform(C, 84, 0.f, 1.f), u = iot::uniform(C, 85);
  std::vector<float> wkv(T * C), log_den(T * C);
  std::vector<double> dr_ref(T * C), dk_ref(T * C, 0.0), dv_ref(T * C, 0.0), dw_ref(C, 0.0),
      du_ref(C, 0.0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t n = 0; n < T; ++n) {
      std::vector<double> x(n + 1);
      double top = -INFINITY, den = 0.0, y = 0.0;
      for (int64_t m = 0; m <= n; ++m) {
        x[m] = m < n ? double(k[m * C + c]) - double(n - 1 - m) * w[c] : double(u[c]) + k[n * C + c];
        top = std::max(top, x[m]);
      }
      for (int64_t m = 0; m <= n; ++m) den += std::exp(x[m] - top);
      for (int64_t m = 0; m <= n; ++m) y += std::exp(x[m] - top) / den * v[m * C + c];
      wkv[n * C + c] = static_cast<float>(y);
      log_den[n * C + c] = static_cast<float>(top + std::log(den));
      const double s = iot::sigmoid(r[n * C + c]), G = d_out[n * C + c] * s;
      dr_ref[n * C + c] = d_out[n * C + c] * y * s * (1.0 - s);
      for (int64_t m = 0; m <= n; ++m) {
        const double pi = std::exp(x[m] - top) / den, beta = pi * G * (v[m * C + c] - y);
        dv_ref[m * C + c] += pi * G;
        dk_ref[m * C + c] += beta;
        if (m == n)
          du_ref[c] += beta;
        else
          dw_ref[c] -= double(n - 1 - m) * beta;
      }
    }
  auto view = [&](const std::vector<float>& x) {
    return retnet::TensorView::contiguous(const_cast<float*>(x.data()), {1, T, C});
  };
  for (Isa level : iot::cpu_levels()) {
    SCOPED_TRACE(retnet::isa_name(level));
    std::vector<float> dr(T * C, 0.f), dk(T * C, 0.f), dv(T * C, 0.f), dw(C), du(C);
    std::vector<float> scratch(7 * 4 * retnet::kDecayChannelBlock);
    retnet::DecayAttentionGradArgs a;
    a.r = view(r), a.k = view(k), a.v = view(v), a.d_out = view(d_out);
    a.d_r = view(dr), a.d_k = view(dk), a.d_v = view(dv);
    a.w = w.data(), a.u = u.data(), a.wkv = wkv.data(), a.log_denominators = log_den.data();
    const retnet::detail::ChannelDims d{1, T, C};
    RETNET_ISA_VARIANT(level, decay_backward_block)(a, d, 0, 0, C, 4, dw.data(), du.data(),
                                                    scratch.data());
    EXPECT_TRUE(retnet::test::close(dr, dr_ref, 1e-5)) << "d_r";
    EXPECT_TRUE(retnet::test::close(dk, dk_ref, 1e-5)) << "d_k";
    EXPECT_TRUE(retnet::test::close(dv, dv_ref, 1e-5)) << "d_v";
    EXPECT_TRUE(retnet::test::close(dw, dw_ref, 1e-5)) << "d_w";
    EXPECT_TRUE(retnet::test::close(du, du_ref, 1e-5)) << "d_u";
  }
}
