// Linear transformer (elu+1) and Performer (FAVOR+) kernels: the three forms against a double
// recurrence and each other, continuation from a state, gradients against central finite
// differences in double, the feature maps alone, FAVOR+'s random matrix, its approximation of
// softmax attention, and its stability for large inputs.
#include <cmath>
#include <functional>

#include "retnet/core/error.h"
#include "retnet/mixers/linear_attention.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {


// A feature map with the random matrix it points to.
struct OwnedMap {
  std::vector<float> w;
  FeatureMap map;

  static OwnedMap elu() { return {{}, elu_feature_map()}; }
  static OwnedMap favor(int64_t m, int64_t Dk, uint64_t seed = 5) {
    OwnedMap o;
    o.w = favor_random_matrix(seed, m, Dk);
    o.map = favor_feature_map(o.w.data(), m, Dk);
    return o;
  }
  OwnedMap() = default;
  OwnedMap(std::vector<float> w_, FeatureMap m) : w(std::move(w_)), map(m) {}
  OwnedMap(const OwnedMap& o) : w(o.w), map(o.map) { map.favor_w = w.empty() ? nullptr : w.data(); }
};

struct LinearProblem : HeadInputs {
  OwnedMap features;

  LinearProblem(int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, const OwnedMap& map,
                uint64_t seed, double qk_scale = 1.0)
      : HeadInputs(b, t, h, dk, dv, seed, qk_scale, qk_scale), features(map) {}
  int64_t F() const { return features.map.features(Dk); }
  int64_t state_per_sequence() const { return H * linear_attention_state_floats_per_head(F(), Dv); }

  // Runs tokens [t0, t1) of `form` through `state`; writes those rows of out.
  void run_span(Form form, int64_t chunk, int64_t t0, int64_t t1,
                std::vector<float>& state, std::vector<float>& out) {
    LinearAttentionArgs a;
    a.q = view(q, Dk).slice(1, t0, t1);
    a.k = view(k, Dk).slice(1, t0, t1);
    a.v = view(v, Dv).slice(1, t0, t1);
    a.out = view(out, Dv).slice(1, t0, t1);
    a.features = features.map;
    a.state = state.data();
    a.state_stride = state_per_sequence();
    a.chunk = chunk;
    Arena arena(linear_attention_workspace_floats(form, features.map, B, t1 - t0, H, Dk, Dv, chunk));
    linear_attention_forward(form, a, arena);
  }
  std::vector<float> run(Form form, int64_t chunk = 64) {
    std::vector<float> out(B * T * H * Dv, NAN), state(B * state_per_sequence(), 0.f);
    run_span(form, chunk, 0, T, state, out);
    return out;
  }

  // One head's rows, contiguous.
  std::vector<float> head(const std::vector<float>& x, int64_t D, int64_t b, int64_t h) const {
    return test::head_rows(x, T, H, D, b, h);
  }
  // The double-precision recurrence, laid out like run()'s output.
  std::vector<double> reference() const {
    std::vector<double> out(B * T * H * Dv);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        auto qh = head(q, Dk, b, h), kh = head(k, Dk, b, h), vh = head(v, Dv, b, h);
        std::vector<double> oh(T * Dv);
        linear_attention_reference(features.map, qh.data(), kh.data(), vh.data(), oh.data(), T, Dk,
                                   Dv);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < Dv; ++j) out[((b * T + t) * H + h) * Dv + j] = oh[t * Dv + j];
      }
    return out;
  }
};

void check_all_linear_forms(LinearProblem& p) {
  auto ref = p.reference();
  SCOPED_TRACE(::testing::Message() << feature_map_name(p.features.map.kind) << " B" << p.B
                                    << " T" << p.T << " H" << p.H << " Dk" << p.Dk << " Dv" << p.Dv);
  expect_forms_match_reference(p, ref);
}

using LinearShape = std::array<int64_t, 5>;  // B, T, H, Dk, Dv
const LinearShape kLinearShapes[] = {
    {1, 1, 1, 4, 4}, {2, 7, 3, 8, 6}, {1, 64, 2, 16, 16}, {3, 50, 2, 8, 12}};

// Continuing from a state equals one pass, for both stateful forms and two split points.
void check_continuation(LinearProblem& p) {
  auto whole = p.reference();
  for (Form form : {Form::Recurrent, Form::Chunkwise}) {
    for (int64_t split : {int64_t{1}, int64_t{23}}) {
      std::vector<float> out(whole.size(), NAN), state(p.B * p.state_per_sequence(), 0.f);
      p.run_span(form, 8, 0, split, state, out);
      p.run_span(form, 8, split, p.T, state, out);
      EXPECT_TRUE(close(out, whole, 1e-5))
          << form_name(form) << " split at " << split;
    }
  }
}

// The composite (feature map + attention) in double, all heads: q, k [B, T, H, Dk], v [B, T, H, Dv].
std::vector<double> linear_forward_double(const FeatureMap& map, const std::vector<double>& q,
                                          const std::vector<double>& k,
                                          const std::vector<double>& v, int64_t B, int64_t T,
                                          int64_t H, int64_t Dk, int64_t Dv) {
  const int64_t F = map.features(Dk), W = Dv + 1;
  std::vector<double> out(B * T * H * Dv), S(F * W), pq(F), pk(F), aug(W);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * H + h;
        feature_map_reference(map, FeatureRole::Query, &q[row * Dk], Dk, pq.data());
        feature_map_reference(map, FeatureRole::Key, &k[row * Dk], Dk, pk.data());
        std::fill(aug.begin(), aug.end(), 0.0);
        for (int64_t i = 0; i < F; ++i)
          for (int64_t j = 0; j < W; ++j) {
            S[i * W + j] += pk[i] * (j < Dv ? v[row * Dv + j] : 1.0);
            aug[j] += pq[i] * S[i * W + j];
          }
        for (int64_t j = 0; j < Dv; ++j) out[row * Dv + j] = aug[j] / aug[Dv];
      }
    }
  return out;
}

// Relative 1e-4, except where the true gradient is identically 0 (one token: o = v whatever q and
// k are), where only float rounding of cancelling terms remains: there absolutely.
void check_gradient(const std::vector<float>& got, const std::vector<double>& want,
                    const char* name) {
  EXPECT_TRUE(retnet::test::close_or_zero(got, want, 1e-4, 1e-8)) << name;
}

void check_linear_gradients(const OwnedMap& features, const LinearShape& shape, double qk_scale) {
  const auto [B, T, H, Dk, Dv] = shape;
  LinearProblem p(B, T, H, Dk, Dv, features, 40 + T, qk_scale);
  const FeatureMap& map = p.features.map;
  auto d_out = random_vector(B * T * H * Dv, 77);
  // Expected gradients: central differences of the double-precision composite.
  std::vector<double> q(p.q.begin(), p.q.end()), k(p.k.begin(), p.k.end()), v(p.v.begin(), p.v.end());
  auto loss = [&, B = B, T = T, H = H, Dk = Dk, Dv = Dv] {
    auto o = linear_forward_double(map, q, k, v, B, T, H, Dk, Dv);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * d_out[i];
    return s;
  };
  const auto eq = finite_differences(loss, q), ek = finite_differences(loss, k),
             ev = finite_differences(loss, v);
  const int64_t F = p.F();
  for (Form form : {Form::Parallel, Form::Chunkwise}) {
    for (int64_t chunk : {int64_t{5}, T}) {
      if (form == Form::Parallel && chunk != T) continue;
      SCOPED_TRACE(::testing::Message() << feature_map_name(map.kind) << " "
                                        << form_name(form) << " chunk " << chunk
                                        << " T " << T << " scale " << qk_scale);
      std::vector<float> out(v.size()), phi_q(B * T * H * F), phi_k(B * T * H * F), inv(B * T * H);
      std::vector<float> state(B * p.state_per_sequence(), 0.f);
      LinearAttentionArgs fa;
      fa.q = p.view(p.q, Dk), fa.k = p.view(p.k, Dk), fa.v = p.view(p.v, Dv);
      fa.out = p.view(out, Dv);
      fa.features = map;
      fa.state = state.data();
      fa.state_stride = p.state_per_sequence();
      fa.chunk = chunk;
      fa.saved_phi_q = phi_q.data(), fa.saved_phi_k = phi_k.data();
      fa.saved_inv_denominators = inv.data();
      Arena arena(std::max(linear_attention_workspace_floats(form, map, B, T, H, Dk, Dv, chunk),
                           linear_attention_backward_workspace_floats(form, map, B, T, H, Dk, Dv,
                                                                      chunk)));
      linear_attention_forward(form, fa, arena);
      std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
      LinearAttentionGradArgs ga;
      ga.q = fa.q, ga.k = fa.k, ga.v = fa.v, ga.out = fa.out, ga.d_out = p.view(d_out, Dv);
      ga.d_q = p.view(dq, Dk), ga.d_k = p.view(dk, Dk), ga.d_v = p.view(dv, Dv);
      ga.features = map;
      ga.phi_q = phi_q.data(), ga.phi_k = phi_k.data(), ga.inv_denominators = inv.data();
      ga.chunk = chunk;
      ASSERT_TRUE(retnet::test::accumulates_over_two_calls(
          arena, [&] { linear_attention_backward(form, ga, arena); }, dq, {&dq, &dk, &dv}));
      check_gradient(dq, eq, "dq");
      check_gradient(dk, ek, "dk");
      check_gradient(dv, ev, "dv");
    }
  }
}

// Causal softmax attention with scores q . k / sqrt(Dk), one head, in double.
std::vector<double> softmax_attention(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, int64_t T, int64_t Dk,
                                      int64_t Dv) {
  std::vector<double> out(T * Dv, 0.0);
  for (int64_t n = 0; n < T; ++n) {
    std::vector<double> s(n + 1);
    double top = -1e300, z = 0;
    for (int64_t m = 0; m <= n; ++m) {
      double dot = 0;
      for (int64_t i = 0; i < Dk; ++i) dot += double(q[n * Dk + i]) * k[m * Dk + i];
      s[m] = dot / std::sqrt(double(Dk));
      top = std::max(top, s[m]);
    }
    for (int64_t m = 0; m <= n; ++m) z += s[m] = std::exp(s[m] - top);
    for (int64_t m = 0; m <= n; ++m)
      for (int64_t j = 0; j < Dv; ++j) out[n * Dv + j] += s[m] / z * v[m * Dv + j];
  }
  return out;
}

}  // namespace

TEST(LinearAttention, AllFormsMatchDoubleReference) {
  for (const LinearShape& s : kLinearShapes) {
    LinearProblem p(s[0], s[1], s[2], s[3], s[4], OwnedMap::elu(), 11 + s[1]);
    check_all_linear_forms(p);
  }
}

TEST(Performer, AllFormsMatchDoubleReference) {
  for (const LinearShape& s : kLinearShapes)
    for (int64_t m : {int64_t{16}, int64_t{3 * s[3] + 1}}) {  // fewer and more features than Dk
      LinearProblem p(s[0], s[1], s[2], s[3], s[4], OwnedMap::favor(m, s[3]), 11 + s[1]);
      check_all_linear_forms(p);
    }
}

TEST(LinearAttention, ContinuesFromAState) {
  LinearProblem p(2, 50, 2, 8, 8, OwnedMap::elu(), 3);
  check_continuation(p);
}

TEST(Performer, ContinuesFromAState) {
  LinearProblem p(2, 50, 2, 8, 8, OwnedMap::favor(24, 8), 3);
  check_continuation(p);
}

TEST(LinearAttention, StridedViewsMatchContiguous) {
  // q, k, v as column slices of one fused [B, T, H, 2 Dk + Dv] buffer, the output likewise.
  const int64_t B = 2, T = 19, H = 2, Dk = 8, Dv = 4, D = 2 * Dk + Dv;
  for (const OwnedMap& map : {OwnedMap::elu(), OwnedMap::favor(12, Dk)}) {
    LinearProblem p(B, T, H, Dk, Dv, map, 9);
    auto fused = random_vector(B * T * H * D, 1);
    for (int64_t r = 0; r < B * T * H; ++r) {
      std::copy_n(&p.q[r * Dk], Dk, &fused[r * D]);
      std::copy_n(&p.k[r * Dk], Dk, &fused[r * D + Dk]);
      std::copy_n(&p.v[r * Dv], Dv, &fused[r * D + 2 * Dk]);
    }
    std::vector<float> out_wide(B * T * H * 2 * Dv, 0.f);
    auto all = TensorView::contiguous(fused.data(), {B, T, H, D});
    auto wide = TensorView::contiguous(out_wide.data(), {B, T, H, 2 * Dv});
    for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise}) {
      std::vector<float> state(B * p.state_per_sequence(), 0.f);
      LinearAttentionArgs a;
      a.q = all.slice(3, 0, Dk), a.k = all.slice(3, Dk, 2 * Dk), a.v = all.slice(3, 2 * Dk, D);
      a.out = wide.slice(3, Dv, 2 * Dv);
      a.features = p.features.map;
      a.state = state.data();
      a.state_stride = p.state_per_sequence();
      a.chunk = 4;
      Arena arena(linear_attention_workspace_floats(form, a.features, B, T, H, Dk, Dv, 4));
      linear_attention_forward(form, a, arena);
      std::vector<float> out(B * T * H * Dv);
      for (int64_t r = 0; r < B * T * H; ++r) std::copy_n(&out_wide[r * 2 * Dv + Dv], Dv, &out[r * Dv]);
      EXPECT_TRUE(close(out, p.reference(), 1e-5))
          << feature_map_name(map.map.kind) << " " << form_name(form);
    }
  }
}

TEST(LinearAttention, GradientsMatchFiniteDifferences) {
  for (const LinearShape& s : {LinearShape{1, 1, 1, 4, 4}, LinearShape{2, 13, 2, 6, 5}})
    for (double scale : {0.5, 2.0}) check_linear_gradients(OwnedMap::elu(), s, scale);
}

TEST(Performer, GradientsMatchFiniteDifferences) {
  for (const LinearShape& s : {LinearShape{1, 1, 1, 4, 4}, LinearShape{2, 13, 2, 6, 5}})
    for (double scale : {0.5, 2.0}) check_linear_gradients(OwnedMap::favor(10, s[3]), s, scale);
}

TEST(LinearAttention, FeatureMapBackwardMatchesFiniteDifferences) {
  // loss = sum(phi(x) * r). FAVOR+ keys: a constant shift, so the map is the function the
  // backward differentiates (queries' row-max shift is covered by the composite tests above).
  const int64_t B = 2, T = 5, H = 2, Dk = 6;
  for (const OwnedMap& map : {OwnedMap::elu(), OwnedMap::favor(9, Dk)}) {
    const int64_t F = map.map.features(Dk);
    auto xf = random_vector(B * T * H * Dk, 8, 1.5);
    auto r = random_vector(B * T * H * F, 9);
    std::vector<double> x(xf.begin(), xf.end());
    auto loss = [&] {
      std::vector<double> phi(F);
      double s = 0;
      for (int64_t row = 0; row < B * T * H; ++row) {
        feature_map_reference(map.map, FeatureRole::Key, &x[row * Dk], Dk, phi.data());
        for (int64_t j = 0; j < F; ++j) s += phi[j] * r[row * F + j];
      }
      return s;
    };
    const auto want = finite_differences(loss, x);
    std::vector<float> phi(B * T * H * F), dx(xf.size(), 0.f);
    auto xv = TensorView::contiguous(xf.data(), {B, T, H, Dk});
    auto pv = TensorView::contiguous(phi.data(), {B, T, H, F});
    feature_map_forward(map.map, FeatureRole::Key, xv, pv);
    Arena arena(feature_map_backward_workspace_floats(map.map, B, T, H));
    feature_map_backward(map.map, xv, pv, TensorView::contiguous(r.data(), {B, T, H, F}),
                         TensorView::contiguous(dx.data(), {B, T, H, Dk}), arena);
    EXPECT_TRUE(close(dx, want, 1e-4)) << feature_map_name(map.map.kind);
  }
}

TEST(Performer, RandomMatrixRowsAreOrthogonalWithinBlocks) {
  const int64_t m = 40, Dk = 16;  // blocks of 16, 16 and 8 rows
  auto w = favor_random_matrix(123, m, Dk);
  auto dot = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t l = 0; l < Dk; ++l) s += double(w[i * Dk + l]) * w[j * Dk + l];
    return s;
  };
  double mean_sq = 0, lo = 1e300, hi = 0;
  for (int64_t i = 0; i < m; ++i) {
    mean_sq += dot(i, i) / m;
    lo = std::min(lo, dot(i, i));
    hi = std::max(hi, dot(i, i));
    for (int64_t j = i + 1; j < m && j / Dk == i / Dk; ++j)
      EXPECT_LT(std::fabs(dot(i, j)) / std::sqrt(dot(i, i) * dot(j, j)), 1e-6) << i << ", " << j;
  }
  // Chi-distributed norms: E|w|^2 = Dk, and they differ from row to row.
  EXPECT_NEAR(mean_sq, double(Dk), 0.35 * Dk);
  EXPECT_GT(hi - lo, 1.0);
  // Rows of different blocks are independent, not orthogonal.
  double cross = 0;
  for (int64_t j = Dk; j < 2 * Dk; ++j) cross = retnet::test::max_keep_nan(cross, std::fabs(dot(0, j)));
  EXPECT_GT(cross, 1e-3);
  // A pure function of (seed, m, Dk).
  EXPECT_EQ(w, favor_random_matrix(123, m, Dk));
  EXPECT_NE(w, favor_random_matrix(124, m, Dk));
}

TEST(Performer, ApproximatesSoftmaxAttention) {
  // Loose statistical check at a fixed seed: the error falls as features are added, and with
  // 4096 features it is under 15% of the output's scale (measured 8%: Monte Carlo noise of
  // 1/sqrt(m) per kernel value, amplified in the ratio for early rows with few keys).
  const int64_t T = 24, Dk = 8, Dv = 4;
  auto q = random_vector(T * Dk, 1, 0.7), k = random_vector(T * Dk, 2, 0.7);
  auto v = random_vector(T * Dv, 3);
  auto want = softmax_attention(q, k, v, T, Dk, Dv);
  auto error_with = [&](int64_t m) {
    OwnedMap map = OwnedMap::favor(m, Dk, 99);
    LinearProblem p(1, T, 1, Dk, Dv, map, 1);
    p.q = q, p.k = k, p.v = v;
    return retnet::test::rel_max_error(p.run(Form::Parallel), want);
  };
  const double e16 = error_with(16), e4096 = error_with(4096);
  std::printf("FAVOR+ vs softmax attention, relative max error: m=16 %.3g, m=4096 %.3g\n", e16,
              e4096);
  EXPECT_LT(e4096, 0.15);
  EXPECT_LT(e4096, e16 / 3);
}

TEST(Performer, StaysFiniteForLargeInputs) {
  const int64_t B = 1, T = 20, H = 2, Dk = 16, Dv = 4;
  for (double q_scale : {1.0, 1e2, 1e4})
    for (double k_scale : {1.0, 1e2, 1e4}) {
      LinearProblem p(B, T, H, Dk, Dv, OwnedMap::favor(32, Dk), 4);
      for (float& x : p.q) x *= q_scale;
      for (float& x : p.k) x *= k_scale;
      SCOPED_TRACE(::testing::Message() << "q scale " << q_scale << ", k scale " << k_scale);
      std::vector<std::vector<float>> outs;
      for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise}) {
        outs.push_back(p.run(form, 6));
        for (float o : outs.back()) ASSERT_TRUE(std::isfinite(o)) << form_name(form);
      }
      EXPECT_TRUE(close(outs[1], outs[0], 1e-5));
      EXPECT_TRUE(close(outs[2], outs[0], 1e-5));
      // Large queries with ordinary keys are well within range: still the exact definition.
      if (k_scale == 1.0) {
        EXPECT_TRUE(close(outs[0], p.reference(), 1e-4));
      }
    }
}

TEST(Performer, KeyShiftKeepsAlignedKeysFinite) {
  // Keys aligned with a random row (x' = w_j) reach the largest feature, exp(|w_j|^2 / 2): about
  // exp(140) at Dk = 256, beyond float. The key shift caps it at exp(kFavorKeyHeadroom) / sqrt(m).
  const int64_t T = 6, Dk = 256, Dv = 4, m = 64;
  LinearProblem p(1, T, 1, Dk, Dv, OwnedMap::favor(m, Dk), 6, 0.3);
  const FeatureMap& map = p.features.map;
  EXPECT_GT(map.favor_key_shift, 0.f);
  const float root4 = std::pow(float(Dk), 0.25f);
  for (int64_t t = 0; t < T; t += 2)
    for (int64_t i = 0; i < Dk; ++i) p.k[t * Dk + i] = p.features.w[t * Dk + i] * root4;
  std::vector<float> phi(T * m);
  feature_map_forward(map, FeatureRole::Key, p.view(p.k, Dk),
                      TensorView::contiguous(phi.data(), {1, T, 1, m}));
  for (float f : phi) {
    ASSERT_TRUE(std::isfinite(f));
    EXPECT_LE(f, std::exp(kFavorKeyHeadroom) / std::sqrt(double(m)) * (1 + 1e-5));
  }
  auto ref = p.reference();
  for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise})
    EXPECT_TRUE(close(p.run(form, 4), ref, 1e-5)) << form_name(form);
}

TEST(LinearAttention, RejectsBadArguments) {
  LinearProblem p(1, 4, 1, 4, 4, OwnedMap::elu(), 1);
  std::vector<float> out(16);
  LinearAttentionArgs a;
  a.q = p.view(p.q, 4), a.k = p.view(p.k, 4), a.v = p.view(p.v, 4), a.out = p.view(out, 4);
  Arena arena(1 << 16);
  EXPECT_THROW(linear_attention_forward(Form::Recurrent, a, arena), Error);  // no state
  a.out = p.view(out, 2);
  EXPECT_THROW(linear_attention_forward(Form::Parallel, a, arena), Error);  // shape mismatch
  a.out = p.view(out, 4);
  a.features.kind = FeatureMapKind::Favor;  // FAVOR+ without its matrix
  EXPECT_THROW(linear_attention_forward(Form::Parallel, a, arena), Error);
  a.features.kind = FeatureMapKind::EluPlusOne;
  EXPECT_THROW(linear_attention_forward(Form::Scan, a, arena), Error);  // no scan form
  EXPECT_THROW(parse_form("scann"), Error);
  EXPECT_THROW(parse_feature_map("relu"), Error);
  EXPECT_THROW(favor_random_matrix(1, 0, 4), Error);
  LinearAttentionGradArgs g;
  EXPECT_THROW(linear_attention_backward(Form::Recurrent, g, arena), Error);  // no saved features
}
