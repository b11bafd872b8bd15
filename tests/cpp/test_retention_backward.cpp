// Retention backward: a naive double-precision reference gradient, itself checked against central
// finite differences (relative 1e-6), then the float kernels of both training forms against it.
#include <cmath>

#include "retnet/mixers/retention.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {

// The definition in double, one head: q, k [T, Dk], v [T, Dv] -> out [T, Dv].
std::vector<double> retention_forward_ref(const std::vector<double>& q,
                                          const std::vector<double>& k,
                                          const std::vector<double>& v, int64_t T, int64_t Dk,
                                          int64_t Dv, double gamma) {
  std::vector<double> out(T * Dv);
  for (int64_t n = 0; n < T; ++n) {
    std::vector<double> a(Dv + 1, 0.0);
    for (int64_t m = 0; m <= n; ++m) {
      double s = 0;
      for (int64_t i = 0; i < Dk; ++i) s += q[n * Dk + i] * k[m * Dk + i];
      s *= std::pow(gamma, double(n - m));
      for (int64_t j = 0; j < Dv; ++j) a[j] += s * v[m * Dv + j];
      a[Dv] += s;
    }
    double is = 1 / std::sqrt(retention_decay_sum(gamma, n));
    double c = std::max(std::fabs(a[Dv]) * is, 1.0);
    for (int64_t j = 0; j < Dv; ++j) out[n * Dv + j] = a[j] * is / c;
  }
  return out;
}

// Its gradient, written out by hand: returns dq, dk, dv for the loss sum(out * d_out).
void retention_backward_ref(const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, const std::vector<double>& d_out,
                            int64_t T, int64_t Dk, int64_t Dv, double gamma,
                            std::vector<double>& dq, std::vector<double>& dk,
                            std::vector<double>& dv) {
  dq.assign(T * Dk, 0), dk.assign(T * Dk, 0), dv.assign(T * Dv, 0);
  auto out = retention_forward_ref(q, k, v, T, Dk, Dv, gamma);
  for (int64_t n = 0; n < T; ++n) {
    // Recompute the row sum r_n to know the clamp's branch.
    double r = 0;
    std::vector<double> score(n + 1);
    for (int64_t m = 0; m <= n; ++m) {
      double s = 0;
      for (int64_t i = 0; i < Dk; ++i) s += q[n * Dk + i] * k[m * Dk + i];
      score[m] = s * std::pow(gamma, double(n - m));
      r += score[m];
    }
    double is = 1 / std::sqrt(retention_decay_sum(gamma, n));
    bool clamped = std::fabs(r) * is > 1;
    double alpha = clamped ? 1 / std::fabs(r) : is;
    double dot = 0;
    for (int64_t j = 0; j < Dv; ++j) dot += d_out[n * Dv + j] * out[n * Dv + j];
    double dr = clamped ? -dot / r : 0;
    for (int64_t m = 0; m <= n; ++m) {
      // d score_nm = sum_j G_nj v_mj + dr, with G = alpha d_out.
      double ds = dr;
      for (int64_t j = 0; j < Dv; ++j) {
        ds += alpha * d_out[n * Dv + j] * v[m * Dv + j];
        dv[m * Dv + j] += alpha * d_out[n * Dv + j] * score[m];
      }
      ds *= std::pow(gamma, double(n - m));
      retnet::test::add_score_gradient(ds, &q[n * Dk], &k[m * Dk], &dq[n * Dk], &dk[m * Dk], Dk);
    }
  }
}

}  // namespace

TEST(RetentionBackward, ReferenceMatchesFiniteDifferences) {
  const int64_t T = 9, Dk = 4, Dv = 3;
  const double gamma = 0.9;
  for (double scale : {0.3, 3.0}) {  // without and with the clamp active
    auto q = to_double(random_vector(T * Dk, 1, scale)), k = to_double(random_vector(T * Dk, 2, scale));
    auto v = to_double(random_vector(T * Dv, 3)), d_out = to_double(random_vector(T * Dv, 4));
    std::vector<double> dq, dk, dv;
    retention_backward_ref(q, k, v, d_out, T, Dk, Dv, gamma, dq, dk, dv);
    auto loss = [&] {
      auto o = retention_forward_ref(q, k, v, T, Dk, Dv, gamma);
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * d_out[i];
      return s;
    };
    for (auto [x, g] : {std::pair{&q, &dq}, {&k, &dk}, {&v, &dv}})
      EXPECT_TRUE(close(*g, finite_differences(loss, *x), 1e-6)) << "scale " << scale;
  }
}

TEST(RetentionBackward, BothFormsMatchTheReference) {
  for (auto [B, T, H, Dk, Dv] : {std::array<int64_t, 5>{1, 1, 1, 4, 4},
                                 {2, 23, 3, 8, 6},
                                 {1, 70, 2, 16, 8}}) {
    for (double scale : {0.5, 3.0}) {
      auto q = random_vector(B * T * H * Dk, 10 + T, scale), k = random_vector(B * T * H * Dk, 20 + T, scale / std::sqrt(double(Dk)));
      auto v = random_vector(B * T * H * Dv, 30 + T), d_out = random_vector(B * T * H * Dv, 40 + T);
      std::vector<double> gammas;
      for (int64_t h = 0; h < H; ++h) gammas.push_back(1 - std::exp2(-3.0 - h));
      // Expected gradients, head by head, in double.
      std::vector<double> eq(q.size()), ek(k.size()), ev(v.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          auto take = [&, T = T, H = H](const std::vector<float>& x, int64_t D) {
            std::vector<double> r(T * D);
            for (int64_t t = 0; t < T; ++t)
              for (int64_t i = 0; i < D; ++i) r[t * D + i] = x[((b * T + t) * H + h) * D + i];
            return r;
          };
          std::vector<double> dq, dk, dv;
          retention_backward_ref(take(q, Dk), take(k, Dk), take(v, Dv), take(d_out, Dv), T, Dk, Dv,
                                 gammas[h], dq, dk, dv);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t i = 0; i < Dk; ++i) {
              eq[((b * T + t) * H + h) * Dk + i] = dq[t * Dk + i];
              ek[((b * T + t) * H + h) * Dk + i] = dk[t * Dk + i];
            }
            for (int64_t i = 0; i < Dv; ++i) ev[((b * T + t) * H + h) * Dv + i] = dv[t * Dv + i];
          }
        }
      for (Form form : {Form::Parallel, Form::Chunkwise}) {
        for (int64_t chunk : {int64_t{5}, T}) {
          if (form == Form::Parallel && chunk != T) continue;
          std::vector<float> out(v.size()), stats(B * T * H * 2);
          std::vector<float> state(B * H * retention_state_floats_per_head(Dk, Dv), 0.f);
          auto view = [&, B = B, T = T, H = H](std::vector<float>& x, int64_t D) { return TensorView::contiguous(x.data(), {B, T, H, D}); };
          RetentionArgs fa;
          fa.q = view(q, Dk), fa.k = view(k, Dk), fa.v = view(v, Dv), fa.out = view(out, Dv);
          fa.gammas = gammas.data();
          fa.state = state.data();
          fa.state_stride = H * retention_state_floats_per_head(Dk, Dv);
          fa.chunk = chunk;
          fa.row_stats = stats.data();
          Arena arena(retention_workspace_floats(form, B, T, H, Dk, Dv, chunk, 0) +
                      retention_backward_workspace_floats(form, T, Dk, Dv, chunk));
          retention_forward(form, fa, arena);
          std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
          RetentionGradArgs ga;
          ga.q = fa.q, ga.k = fa.k, ga.v = fa.v, ga.out = fa.out, ga.d_out = view(d_out, Dv);
          ga.d_q = view(dq, Dk), ga.d_k = view(dk, Dk), ga.d_v = view(dv, Dv);
          ga.row_stats = stats.data();
          ga.gammas = gammas.data();
          ga.chunk = chunk;
          ASSERT_TRUE(retnet::test::accumulates_over_two_calls(
              arena, [&] { retention_backward(form, ga, arena); }, dv, {&dq, &dk, &dv}));
          SCOPED_TRACE(::testing::Message() << form_name(form) << " chunk " << chunk << " T " << T << " scale " << scale);
          // Where the true gradient is identically 0 (one clamped token: the output does not depend
          // on q and k), only float rounding of the cancelling terms remains: check it absolutely.
          EXPECT_TRUE(retnet::test::close_or_zero(dq, eq, 1e-4, 1e-12)) << "dq";
          EXPECT_TRUE(retnet::test::close_or_zero(dk, ek, 1e-4, 1e-12)) << "dk";
          EXPECT_TRUE(retnet::test::close_or_zero(dv, ev, 1e-4, 1e-12)) << "dv";
        }
      }
    }
  }
}
