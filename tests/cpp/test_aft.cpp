// AFT-full: the tiled forward against a double-precision definition (tiles that divide T and that
// don't, T > L so the clamped distances matter, channel blocks cut short, strided views, |k| ~ 1e3
// and bias +-50), the backward for q, k, v and bias by central finite differences and against a
// double gradient, and the key/value cache (step by step and prefill in pieces equal the forward,
// batched decode equals each sequence alone, growth, a full cache).
#include <omp.h>

#include <array>
#include <cmath>

#include "retnet/core/error.h"
#include "retnet/mixers/aft.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;
using retnet::test::finite_differences;
using retnet::test::random_vector;
using retnet::test::to_double;

namespace {

struct AftProblem {
  int64_t B, T, C, L;
  std::vector<float> q, k, v, bias;  // q, k, v [B, T, C] contiguous; bias [L]

  AftProblem(int64_t b, int64_t t, int64_t c, int64_t l, uint64_t seed, double k_scale = 1.0,
             double bias_scale = 1.0)
      : B(b), T(t), C(c), L(l) {
    q = random_vector(B * T * C, seed, 2.0, 0);
    k = random_vector(B * T * C, seed, k_scale, 1);
    v = random_vector(B * T * C, seed, 1.0, 2);
    bias = random_vector(L, seed, bias_scale, 3);
  }

  TensorView view(std::vector<float>& x) const {
    return TensorView::contiguous(x.data(), {B, T, C});
  }

  // The tiled forward; out [B, T, C]; saved (max, denominator, ratio) if not null.
  std::vector<float> forward(int64_t tile, std::array<std::vector<float>, 3>* saved = nullptr) {
    std::vector<float> out(B * T * C, NAN);
    AftArgs a;
    a.q = view(q), a.k = view(k), a.v = view(v), a.out = view(out);
    a.bias = bias.data(), a.L = L, a.tile = tile;
    if (saved) {
      for (auto& s : *saved) s.assign(B * T * C, NAN);
      a.row_max = (*saved)[0].data(), a.denominator = (*saved)[1].data();
      a.ratio = (*saved)[2].data();
    }
    Arena arena(aft_workspace_floats(tile));
    aft_forward(a, arena);
    return out;
  }

  std::vector<float> sequence(const std::vector<float>& x, int64_t b) const {
    return {x.begin() + b * T * C, x.begin() + (b + 1) * T * C};
  }

  // aft_reference sequence by sequence, laid out like forward()'s output.
  std::vector<double> reference() const {
    std::vector<double> out(B * T * C);
    for (int64_t b = 0; b < B; ++b)
      aft_reference(sequence(q, b).data(), sequence(k, b).data(), sequence(v, b).data(),
                    bias.data(), L, out.data() + b * T * C, T, C);
    return out;
  }
};

// The view of tokens [t0, t0 + n) of x ([B, T, C] contiguous).
TensorView aft_time_slice(std::vector<float>& x, int64_t B, int64_t T, int64_t C, int64_t t0,
                          int64_t n) {
  return TensorView::contiguous(x.data(), {B, T, C}).slice(1, t0, t0 + n);
}

}  // namespace

TEST(AftForward, MatchesTheDoubleReference) {
  // {B, T, C, L, tile}: T = 1; L = 1 (one bias for every distance); T > L; tiles that divide T and
  // that don't; C past one channel block and not a multiple of it; L > T; tile > T.
  for (auto [B, T, C, L, tile] : {std::array<int64_t, 5>{1, 1, 1, 1, 64},
                                  {1, 1, 3, 4, 1},
                                  {2, 37, 5, 8, 16},
                                  {1, 48, 16, 10, 16},
                                  {3, 20, 7, 1, 3},
                                  {1, 150, 70, 20, 64},
                                  {2, 70, 130, 100, 200}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << B << " T " << T << " C " << C << " L " << L << " tile " << tile);
    AftProblem p(B, T, C, L, 100 + T);
    std::array<std::vector<float>, 3> saved;
    auto out = p.forward(tile, &saved);
    EXPECT_TRUE(close(out, p.reference(), 1e-5));
    // The saved ratio is the ungated output: out = sigmoid(q) ratio.
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], saved[2][i] / (1 + std::exp(-p.q[i])), 1e-6 * (1 + std::fabs(out[i])));
  }
}

TEST(AftForward, LargeKeysAndBiasStayFinite) {
  // |k| up to ~1e3 and bias +-50: the per-(query, channel) maximum keeps every exponential in
  // range. Then a case built against a factored exp(w - max w) exp(k - max k): the key with the
  // largest k sits where the bias is -50 and the nearest key, with bias +50, has k = -1000, so
  // each factor of the dominant term underflows on its own.
  AftProblem p(2, 45, 9, 6, 7, 400.0, 50.0);
  for (float& x : p.bias) x = std::clamp(x, -50.f, 50.f);
  for (float& x : p.k) x = std::clamp(x, -1000.f, 1000.f);
  auto out = p.forward(8);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_TRUE(close(out, p.reference(), 1e-5));

  AftProblem f(1, 12, 3, 4, 8);
  f.bias = {50.f, -50.f, -50.f, -50.f};
  for (int64_t t = 0; t < f.T; ++t)
    for (int64_t c = 0; c < f.C; ++c) f.k[t * f.C + c] = (t % 2 == 0) ? 1000.f : -1000.f + c;
  out = f.forward(5);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_TRUE(close(out, f.reference(), 1e-5));
}

TEST(AftForward, StridedViews) {
  // q, k, v interleaved in one [B, T, 3, C] buffer (a fused projection) and out with padded rows.
  const int64_t B = 2, T = 29, C = 12, L = 7, pad = 5;
  AftProblem p(B, T, C, L, 11);
  std::vector<float> qkv(B * T * 3 * C), out(B * T * (C + pad), NAN);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      qkv[r * 3 * C + c] = p.q[r * C + c];
      qkv[r * 3 * C + C + c] = p.k[r * C + c];
      qkv[r * 3 * C + 2 * C + c] = p.v[r * C + c];
    }
  auto strided = [&](float* data, int64_t row) {
    TensorView t;
    t.data = data;
    t.ndim = 3;
    t.shape = {B, T, C, 1};
    t.stride = {T * row, row, 1, 0};
    return t;
  };
  AftArgs a;
  a.q = strided(qkv.data(), 3 * C);
  a.k = strided(qkv.data() + C, 3 * C);
  a.v = strided(qkv.data() + 2 * C, 3 * C);
  a.out = strided(out.data(), C + pad);
  a.bias = p.bias.data(), a.L = L, a.tile = 8;
  Arena arena(aft_workspace_floats(a.tile));
  aft_forward(a, arena);
  std::vector<float> got(B * T * C);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) got[r * C + c] = out[r * (C + pad) + c];
  EXPECT_TRUE(close(got, p.reference(), 1e-5));
}

TEST(AftForward, WorkspaceIsPerThreadTilesOnly) {
  // O(tile * channel block) per thread, whatever T and C: no [T, T] and no [T, C] buffer.
  const size_t threads = static_cast<size_t>(omp_get_max_threads());
  EXPECT_LE(aft_workspace_floats(64), Arena::footprint(3 * 64 * kAftChannelBlock * threads));
  EXPECT_LE(aft_backward_workspace_floats(2048, 64),
            (2 * 64 * kAftChannelBlock + 2 * kAftChannelBlock + 2 * 2048 + 32) * threads);
}

TEST(AftForward, RejectsBadInput) {
  AftProblem p(1, 4, 8, 3, 3);
  std::vector<float> out(p.B * p.T * 4), saved(p.B * p.T * p.C);
  AftArgs a;
  a.q = p.view(p.q), a.k = p.view(p.k), a.v = p.view(p.v);
  a.out = TensorView::contiguous(out.data(), {1, 4, 4});
  a.bias = p.bias.data(), a.L = p.L;
  Arena arena(aft_workspace_floats(64));
  EXPECT_THROW(aft_forward(a, arena), Error);  // out has the wrong C
  a.out = p.view(p.v);
  a.L = 0;
  EXPECT_THROW(aft_forward(a, arena), Error);  // no bias entries
  a.L = p.L, a.tile = 0;
  EXPECT_THROW(aft_forward(a, arena), Error);
  a.tile = 8, a.row_max = saved.data();
  EXPECT_THROW(aft_forward(a, arena), Error);  // one saved buffer of three
  a.row_max = nullptr;
  a.q = TensorView::contiguous(p.q.data(), {1, 4, 2, 4});
  EXPECT_THROW(aft_forward(a, arena), Error);  // 4-d view
}

// ---- backward ----------------------------------------------------------------------------------
namespace {

// The definition in double, one sequence: q, k, v [T, C], bias [L] -> out [T, C].
std::vector<double> aft_forward_ref(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, const std::vector<double>& bias,
                                    int64_t T, int64_t C) {
  const int64_t L = static_cast<int64_t>(bias.size());
  std::vector<double> out(T * C), e(T);
  for (int64_t n = 0; n < T; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double m = -INFINITY, num = 0, den = 0;
      for (int64_t j = 0; j <= n; ++j)
        m = std::max(m, e[j] = bias[std::min(n - j, L - 1)] + k[j * C + c]);
      for (int64_t j = 0; j <= n; ++j) {
        num += std::exp(e[j] - m) * v[j * C + c];
        den += std::exp(e[j] - m);
      }
      out[n * C + c] = num / den / (1 + std::exp(-q[n * C + c]));
    }
  return out;
}

// Its gradient for the loss sum(out * d_out), written out from the softmax Jacobian.
void aft_backward_ref(const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& bias,
                      const std::vector<double>& d_out, int64_t T, int64_t C,
                      std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv,
                      std::vector<double>& dbias) {
  const int64_t L = static_cast<int64_t>(bias.size());
  dq.assign(T * C, 0), dk.assign(T * C, 0), dv.assign(T * C, 0), dbias.assign(L, 0);
  std::vector<double> p(T);
  for (int64_t n = 0; n < T; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double m = -INFINITY, den = 0, r = 0;
      for (int64_t j = 0; j <= n; ++j)
        m = std::max(m, p[j] = bias[std::min(n - j, L - 1)] + k[j * C + c]);
      for (int64_t j = 0; j <= n; ++j) den += (p[j] = std::exp(p[j] - m));
      for (int64_t j = 0; j <= n; ++j) r += (p[j] /= den) * v[j * C + c];
      const double s = 1 / (1 + std::exp(-q[n * C + c])), g = d_out[n * C + c] * s;
      dq[n * C + c] += d_out[n * C + c] * r * s * (1 - s);
      for (int64_t j = 0; j <= n; ++j) {
        const double de = p[j] * g * (v[j * C + c] - r);
        dv[j * C + c] += p[j] * g;
        dk[j * C + c] += de;
        dbias[std::min(n - j, L - 1)] += de;
      }
    }
}

// The kernel's forward (saving) and backward over problem p; gradients [B, T, C] and [L].
struct KernelGradients {
  std::vector<float> dq, dk, dv, dbias;
};
KernelGradients kernel_gradients(AftProblem& p, const std::vector<float>& d_out, int64_t tile,
                                 int calls = 1) {
  std::array<std::vector<float>, 3> saved;
  p.forward(tile, &saved);
  KernelGradients r{std::vector<float>(p.q.size(), 0.f), std::vector<float>(p.k.size(), 0.f),
                    std::vector<float>(p.v.size(), 0.f), std::vector<float>(p.L, 0.f)};
  std::vector<float> dout = d_out;
  AftGradArgs g;
  g.q = p.view(p.q), g.k = p.view(p.k), g.v = p.view(p.v), g.d_out = p.view(dout);
  g.d_q = p.view(r.dq), g.d_k = p.view(r.dk), g.d_v = p.view(r.dv);
  g.bias = p.bias.data(), g.d_bias = r.dbias.data(), g.L = p.L;
  g.row_max = saved[0].data(), g.denominator = saved[1].data(), g.ratio = saved[2].data();
  g.tile = tile;
  Arena arena(aft_backward_workspace_floats(p.L, tile));
  for (int i = 0; i < calls; ++i) {
    arena.reset();
    aft_backward(g, arena);
  }
  return r;
}

}  // namespace

TEST(AftBackward, ReferenceMatchesFiniteDifferences) {
  const int64_t T = 9, C = 3, L = 4;  // T > L: distances 3 .. 8 share bias[3]
  auto q = to_double(random_vector(T * C, 1, 2.0)), k = to_double(random_vector(T * C, 2));
  auto v = to_double(random_vector(T * C, 3)), bias = to_double(random_vector(L, 4));
  auto d_out = to_double(random_vector(T * C, 5));
  std::vector<double> dq, dk, dv, dbias;
  aft_backward_ref(q, k, v, bias, d_out, T, C, dq, dk, dv, dbias);
  auto loss = [&] {
    auto o = aft_forward_ref(q, k, v, bias, T, C);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * d_out[i];
    return s;
  };
  for (auto [x, g] : {std::pair{&q, &dq}, {&k, &dk}, {&v, &dv}, {&bias, &dbias}})
    EXPECT_TRUE(close(*g, finite_differences(loss, *x), 1e-6));
}

TEST(AftBackward, KernelMatchesFiniteDifferences) {
  // The float kernels against central differences of the double definition, on every input:
  // two sequences (bias gradients sum over both), T > L, tiles that don't divide T.
  const int64_t B = 2, T = 11, C = 5, L = 4, tile = 4;
  AftProblem p(B, T, C, L, 31);
  auto d_out = random_vector(B * T * C, 32);
  const auto got = kernel_gradients(p, d_out, tile);
  auto q = to_double(p.q), k = to_double(p.k), v = to_double(p.v), bias = to_double(p.bias);
  auto loss = [&] {
    double s = 0;
    for (int64_t b = 0; b < B; ++b) {
      auto part = [&](const std::vector<double>& x) {
        return std::vector<double>(x.begin() + b * T * C, x.begin() + (b + 1) * T * C);
      };
      auto o = aft_forward_ref(part(q), part(k), part(v), bias, T, C);
      for (int64_t i = 0; i < T * C; ++i) s += o[i] * d_out[b * T * C + i];
    }
    return s;
  };
  EXPECT_TRUE(close(got.dq, finite_differences(loss, q), 1e-4)) << "dq";
  EXPECT_TRUE(close(got.dk, finite_differences(loss, k), 1e-4)) << "dk";
  EXPECT_TRUE(close(got.dv, finite_differences(loss, v), 1e-4)) << "dv";
  EXPECT_TRUE(close(got.dbias, finite_differences(loss, bias), 1e-4)) << "dbias";
}

TEST(AftBackward, MatchesTheDoubleGradient) {
  // Larger shapes: several key tiles, channel blocks cut short, L = 1, L > T, large |k| and bias.
  struct Case {
    int64_t B, T, C, L, tile;
    double k_scale, bias_scale;
  };
  for (auto [B, T, C, L, tile, k_scale, bias_scale] :
       {Case{1, 1, 1, 1, 64, 1, 1}, Case{2, 45, 6, 8, 8, 1, 1}, Case{1, 70, 70, 20, 32, 1, 1},
        Case{3, 23, 9, 1, 5, 1, 1}, Case{1, 30, 130, 64, 64, 1, 1},
        Case{1, 40, 8, 12, 16, 300, 20}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << B << " T " << T << " C " << C << " L " << L << " tile " << tile);
    AftProblem p(B, T, C, L, 50 + T, k_scale, bias_scale);
    auto d_out = random_vector(B * T * C, 60 + T);
    std::vector<double> eq(p.q.size()), ek(p.k.size()), ev(p.v.size()), ebias(L, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> dq, dk, dv, dbias;
      aft_backward_ref(to_double(p.sequence(p.q, b)), to_double(p.sequence(p.k, b)),
                       to_double(p.sequence(p.v, b)), to_double(p.bias),
                       to_double(p.sequence(d_out, b)), T, C, dq, dk, dv, dbias);
      std::copy(dq.begin(), dq.end(), eq.begin() + b * T * C);
      std::copy(dk.begin(), dk.end(), ek.begin() + b * T * C);
      std::copy(dv.begin(), dv.end(), ev.begin() + b * T * C);
      for (int64_t l = 0; l < L; ++l) ebias[l] += dbias[l];
    }
    // Gradients accumulate (+=): two calls give twice the gradient.
    auto g = kernel_gradients(p, d_out, tile, 2);
    for (auto* x : {&g.dq, &g.dk, &g.dv, &g.dbias})
      for (float& e : *x) e *= 0.5f;
    EXPECT_TRUE(close(g.dq, eq, 1e-4)) << "dq";
    EXPECT_TRUE(close(g.dk, ek, 1e-4)) << "dk";
    EXPECT_TRUE(close(g.dv, ev, 1e-4)) << "dv";
    // d_bias sums the d_k terms by distance; with L = 1 it is exactly 0 (one shared bias cancels
    // in the softmax), so its error is measured against the d_k scale too.
    double scale = 0, err = 0;
    for (double x : ebias) scale = retnet::test::max_keep_nan(scale, std::fabs(x));
    for (double x : ek) scale = retnet::test::max_keep_nan(scale, std::fabs(x));
    for (int64_t l = 0; l < L; ++l)
      err = retnet::test::max_keep_nan(err, std::fabs(g.dbias[l] - ebias[l]));
    EXPECT_LE(err, 1e-4 * scale) << "dbias";
  }
}

// ---- key/value cache ---------------------------------------------------------------------------
namespace {

using OwnedCache = retnet::test::OwnedCache<AftCache>;

}  // namespace

TEST(AftCache, StepByStepEqualsTheForward) {
  const int64_t B = 2, T = 37, C = 20, L = 8;
  AftProblem p(B, T, C, L, 21);
  const auto want = p.forward(16);
  OwnedCache c(B);
  std::vector<float> out(B * T * C, NAN);
  Arena arena(aft_step_workspace_floats(B, C));
  for (int64_t t = 0; t < T; ++t) {
    aft_cache_reserve(c.cache, c.storage, B, C, 1);  // grows 16 -> 32 -> 64
    arena.reset();
    aft_step(aft_time_slice(p.q, B, T, C, t, 1), aft_time_slice(p.k, B, T, C, t, 1),
             aft_time_slice(p.v, B, T, C, t, 1), aft_time_slice(out, B, T, C, t, 1), c.cache,
             p.bias.data(), L, arena);
  }
  EXPECT_EQ(c.length, (std::vector<int64_t>{T, T}));
  EXPECT_EQ(c.cache.capacity, 64);
  EXPECT_TRUE(close(out, want, 1e-5));
  EXPECT_TRUE(close(out, p.reference(), 1e-5));
}

TEST(AftCache, LongStepCrossesDecodeBlocks) {
  // 600 cached tokens: the step splits them across threads; large k and bias on top.
  const int64_t B = 1, T = 600, C = 33, L = 100;
  AftProblem p(B, T, C, L, 33, 300.0, 20.0);
  OwnedCache c(B);
  aft_cache_reserve(c.cache, c.storage, B, C, T);
  std::vector<float> out(B * T * C, NAN);
  Arena arena(aft_workspace_floats(kAftDefaultTile) + aft_step_workspace_floats(B, C));
  aft_prefill(aft_time_slice(p.q, B, T, C, 0, T - 1), aft_time_slice(p.k, B, T, C, 0, T - 1),
              aft_time_slice(p.v, B, T, C, 0, T - 1), aft_time_slice(out, B, T, C, 0, T - 1),
              c.cache, p.bias.data(), L, arena);
  arena.reset();
  aft_step(aft_time_slice(p.q, B, T, C, T - 1, 1), aft_time_slice(p.k, B, T, C, T - 1, 1),
           aft_time_slice(p.v, B, T, C, T - 1, 1), aft_time_slice(out, B, T, C, T - 1, 1), c.cache,
           p.bias.data(), L, arena);
  EXPECT_TRUE(close(out, p.reference(), 1e-5));
}

TEST(AftCache, PrefillInPiecesEqualsTheForward) {
  const int64_t B = 2, T = 45, C = 70, L = 12;
  AftProblem p(B, T, C, L, 5);
  const auto want = p.forward(64);
  for (auto pieces : {std::vector<int64_t>{T}, {7, 1, 20, 17}, {16, 16, 13}}) {
    OwnedCache c(B);
    std::vector<float> out(B * T * C, NAN);
    Arena arena(aft_workspace_floats(8));
    int64_t t0 = 0;
    for (int64_t n : pieces) {
      aft_cache_reserve(c.cache, c.storage, B, C, n);
      arena.reset();
      aft_prefill(aft_time_slice(p.q, B, T, C, t0, n), aft_time_slice(p.k, B, T, C, t0, n),
                  aft_time_slice(p.v, B, T, C, t0, n), aft_time_slice(out, B, T, C, t0, n), c.cache,
                  p.bias.data(), L, arena, 8);
      t0 += n;
    }
    EXPECT_EQ(c.length, (std::vector<int64_t>{T, T}));
    EXPECT_TRUE(close(out, want, 1e-5)) << "first piece " << pieces[0];
  }
}

TEST(AftCache, BatchedDecodeEqualsEachSequenceAlone) {
  // Sequence 1 is prefilled with 5 tokens on its own (a one-sequence cache over its block), then
  // both decode together at different lengths.
  const int64_t C = 10, L = 6, T0 = 5, steps = 9, T = T0 + steps;
  AftProblem p0(1, T, C, L, 70), p1(1, T, C, L, 71);
  p1.bias = p0.bias;  // one layer: one bias table
  OwnedCache c(2);
  aft_cache_reserve(c.cache, c.storage, 2, C, T);
  AftCache second{c.cache.data + aft_cache_floats(C, c.cache.capacity), c.cache.capacity,
                  c.length.data() + 1};
  std::vector<float> out1(T * C, NAN), out0(steps * C, NAN);
  Arena arena(aft_workspace_floats(kAftDefaultTile) + aft_step_workspace_floats(2, C));
  aft_prefill(aft_time_slice(p1.q, 1, T, C, 0, T0), aft_time_slice(p1.k, 1, T, C, 0, T0),
              aft_time_slice(p1.v, 1, T, C, 0, T0), aft_time_slice(out1, 1, T, C, 0, T0), second,
              p0.bias.data(), L, arena);
  for (int64_t s = 0; s < steps; ++s) {
    // Batch rows: sequence 0 at token s, sequence 1 at token T0 + s.
    auto pack = [&](std::vector<float>& x0, std::vector<float>& x1) {
      std::vector<float> r(2 * C);
      std::copy_n(x0.begin() + s * C, C, r.begin());
      std::copy_n(x1.begin() + (T0 + s) * C, C, r.begin() + C);
      return r;
    };
    auto q = pack(p0.q, p1.q), k = pack(p0.k, p1.k), v = pack(p0.v, p1.v);
    std::vector<float> out(2 * C);
    arena.reset();
    aft_step(TensorView::contiguous(q.data(), {2, 1, C}),
             TensorView::contiguous(k.data(), {2, 1, C}),
             TensorView::contiguous(v.data(), {2, 1, C}),
             TensorView::contiguous(out.data(), {2, 1, C}), c.cache, p0.bias.data(), L, arena);
    std::copy_n(out.begin(), C, out0.begin() + s * C);
    std::copy_n(out.begin() + C, C, out1.begin() + (T0 + s) * C);
  }
  EXPECT_EQ(c.length, (std::vector<int64_t>{steps, T}));
  auto want0 = p0.reference(), want1 = p1.reference();
  EXPECT_TRUE(close(out0, std::vector<double>(want0.begin(), want0.begin() + steps * C), 1e-5));
  EXPECT_TRUE(close(out1, want1, 1e-5));
}

TEST(AftCache, FullCacheThrowsAndLeavesItUnchanged) {
  const int64_t B = 1, T = 3, C = 4, L = 2;
  AftProblem p(B, T, C, L, 9);
  std::vector<float> storage(aft_cache_floats(C, 2)), out(T * C);
  std::vector<int64_t> length{0};
  AftCache c{storage.data(), 2, length.data()};
  Arena arena(aft_workspace_floats(kAftDefaultTile));
  try {
    aft_prefill(p.view(p.q), p.view(p.k), p.view(p.v), p.view(out), c, p.bias.data(), L, arena);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capacity of 2 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(length[0], 0);
}

TEST(AftCache, ReserveDoublesAndKeepsEveryRow) {
  const int64_t B = 3, C = 5;
  OwnedCache c(B);
  aft_cache_reserve(c.cache, c.storage, B, C, 10);
  const int64_t row = aft_cache_floats(C, 1);
  EXPECT_EQ(c.cache.capacity, 16);
  c.length = {16, 3, 9};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.length[b] * row; ++i)
      c.storage[b * 16 * row + i] = float(b * 1000 + i);
  const float* before = c.storage.data();
  aft_cache_reserve(c.cache, c.storage, B, C, 0);  // room enough: nothing moves
  EXPECT_EQ(c.cache.capacity, 16);
  EXPECT_EQ(c.storage.data(), before);
  aft_cache_reserve(c.cache, c.storage, B, C, 1);
  EXPECT_EQ(c.cache.capacity, 32);
  EXPECT_EQ(c.cache.data, c.storage.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.length[b] * row; ++i)
      ASSERT_EQ(c.storage[b * 32 * row + i], float(b * 1000 + i)) << "sequence " << b;
}
