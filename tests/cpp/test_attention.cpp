// Softmax attention: the tiled forward against a double-precision definition (tiles that divide T
// and that don't, T = 1, batches, strided views), the backward against a double gradient that is
// itself checked by central finite differences, the KV cache (step by step and chunked prefill
// equal one tiled pass, the chunkwise form's chunks against the cache, batched decode equals each
// sequence alone, growth, a full cache) and the O(tile^2) workspace.
#include <array>
#include <cmath>

#include "retnet/core/error.h"
#include "retnet/mixers/attention.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {

struct AttentionProblem : HeadInputs {
  AttentionProblem(int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, uint64_t seed,
                   double q_scale = 2.0)
      : HeadInputs(b, t, h, dk, dv, seed, q_scale, 1.0) {}
  int64_t window = 0;  // every kernel's sliding window (0: none)

  // The tiled forward; out [B, T, H, Dv], logsumexp [B, T, H].
  std::vector<float> forward(int64_t tile, std::vector<float>* lse = nullptr) {
    std::vector<float> out(B * T * H * Dv, NAN);
    if (lse) lse->assign(B * T * H, NAN);
    AttentionArgs a;
    a.q = view(q, Dk), a.k = view(k, Dk), a.v = view(v, Dv), a.out = view(out, Dv);
    a.logsumexp = lse ? lse->data() : nullptr;
    a.tile = tile;
    a.window = window;
    Arena arena(attention_workspace_floats(T, Dk, Dv, tile));
    attention_forward(a, arena);
    return out;
  }

  // Rows of head h of sequence b as a contiguous [T, D] block.
  std::vector<float> head(const std::vector<float>& x, int64_t D, int64_t b, int64_t h) const {
    return test::head_rows(x, T, H, D, b, h);
  }

  // attention_reference head by head, laid out like forward()'s outputs.
  std::vector<double> reference(std::vector<double>* lse = nullptr) const {
    std::vector<double> out(B * T * H * Dv);
    if (lse) lse->assign(B * T * H, 0);
    std::vector<double> o(T * Dv), l(T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        attention_reference(head(q, Dk, b, h).data(), head(k, Dk, b, h).data(),
                            head(v, Dv, b, h).data(), o.data(), T, Dk, Dv, l.data(), window);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t c = 0; c < Dv; ++c) out[((b * T + t) * H + h) * Dv + c] = o[t * Dv + c];
          if (lse) (*lse)[(b * T + t) * H + h] = l[t];
        }
      }
    return out;
  }
};

// The view of tokens [t0, t0 + n) of x ([B, T, H, D] contiguous).
TensorView attention_time_slice(std::vector<float>& x, int64_t B, int64_t T, int64_t H, int64_t D,
                                int64_t t0, int64_t n) {
  return TensorView::contiguous(x.data(), {B, T, H, D}).slice(1, t0, t0 + n);
}

}  // namespace

TEST(AttentionForward, MatchesTheDoubleReference) {
  // {B, T, H, Dk, Dv, tile}: T = 1; tiles that divide T and that don't; B > 1; wide heads.
  for (auto [B, T, H, Dk, Dv, tile] : {std::array<int64_t, 6>{1, 1, 1, 4, 4, 64},
                                       {1, 1, 2, 8, 3, 1},
                                       {2, 37, 3, 8, 6, 16},
                                       {1, 48, 2, 16, 8, 16},
                                       {3, 20, 1, 5, 7, 3},
                                       {1, 150, 2, 64, 64, 64},
                                       {2, 70, 2, 32, 16, 200}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " H " << H << " Dk " << Dk
                                      << " Dv " << Dv << " tile " << tile);
    AttentionProblem p(B, T, H, Dk, Dv, 100 + T);
    std::vector<float> lse;
    auto out = p.forward(tile, &lse);
    std::vector<double> want_lse;
    auto want = p.reference(&want_lse);
    EXPECT_TRUE(close(out, want, 1e-5));
    EXPECT_TRUE(close(lse, want_lse, 1e-5));
  }
}

TEST(AttentionForward, LargeScoresStayFinite) {
  // Scores of +-100s: the running maximum keeps every exponential in range.
  AttentionProblem p(1, 40, 2, 16, 16, 7, 60.0);
  auto out = p.forward(8);
  EXPECT_TRUE(close(out, p.reference(), 1e-5));
}

TEST(AttentionForward, StridedViews) {
  // q, k, v interleaved in one [B, T, 3, H, D] buffer (a fused QKV projection) and out with
  // padded rows: every operand has a row stride other than H * D.
  const int64_t B = 2, T = 29, H = 2, D = 8, pad = 5;
  AttentionProblem p(B, T, H, D, D, 11);
  std::vector<float> qkv(B * T * 3 * H * D), out(B * T * (H * D + pad), NAN);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H * D; ++i) {
        const int64_t src = (b * T + t) * H * D + i, row = (b * T + t) * 3 * H * D;
        qkv[row + i] = p.q[src];
        qkv[row + H * D + i] = p.k[src];
        qkv[row + 2 * H * D + i] = p.v[src];
      }
  auto strided = [&](float* data, int64_t row) {
    return TensorView{data, 4, {B, T, H, D}, {T * row, row, D, 1}};
  };
  AttentionArgs a;
  a.q = strided(qkv.data(), 3 * H * D);
  a.k = strided(qkv.data() + H * D, 3 * H * D);
  a.v = strided(qkv.data() + 2 * H * D, 3 * H * D);
  a.out = strided(out.data(), H * D + pad);
  a.tile = 8;
  Arena arena(attention_workspace_floats(T, D, D, a.tile));
  attention_forward(a, arena);
  std::vector<float> got(B * T * H * D);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t i = 0; i < H * D; ++i) got[r * H * D + i] = out[r * (H * D + pad) + i];
  EXPECT_TRUE(close(got, p.reference(), 1e-5));
}

TEST(AttentionForward, WorkspaceIsTileSquaredNotTSquared) {
  const int64_t T = 8192, D = 64, tile = 64;
  const double TT = double(T) * T;
  EXPECT_LT(double(attention_workspace_floats(T, D, D, tile)), TT / 100);
  EXPECT_LT(double(attention_backward_workspace_floats(8, T, 4, D, D, tile)), TT / 100);
  // One head on several threads adds a partial dQ [T, Dk] per thread: O(T), still far below T^2.
  EXPECT_LT(double(attention_backward_workspace_floats(1, T, 1, D, D, tile)), TT / 16);
  // And independent of T once T passes the tile.
  EXPECT_EQ(attention_workspace_floats(T, D, D, tile),
            attention_workspace_floats(4 * T, D, D, tile));
}

TEST(AttentionForward, RejectsBadShapes) {
  AttentionProblem p(1, 4, 2, 8, 8, 3);
  std::vector<float> out(p.B * p.T * p.H * 4);
  AttentionArgs a;
  a.q = p.view(p.q, 8), a.k = p.view(p.k, 8), a.v = p.view(p.v, 8);
  a.out = TensorView::contiguous(out.data(), {1, 4, 2, 4});
  Arena arena(attention_workspace_floats(4, 8, 8, 64));
  EXPECT_THROW(attention_forward(a, arena), Error);
  a.out = p.view(p.v, 8);
  a.tile = 0;
  EXPECT_THROW(attention_forward(a, arena), Error);
}

// ---- backward ------------------------------------------------------------------------------
namespace {

// Row n of the causal softmax of q k^T / sqrt(Dk), in double: p_j for j = 0..n.
std::vector<double> softmax_row(const std::vector<double>& q, const std::vector<double>& k,
                                int64_t n, int64_t Dk) {
  const double scale = 1 / std::sqrt(double(Dk));
  std::vector<double> p(n + 1);
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j <= n; ++j) {
    p[j] = 0;
    for (int64_t i = 0; i < Dk; ++i) p[j] += q[n * Dk + i] * k[j * Dk + i] * scale;
    m = std::max(m, p[j]);
  }
  for (double& x : p) sum += (x = std::exp(x - m));
  for (double& x : p) x /= sum;
  return p;
}

// The definition in double, one head: q, k [T, Dk], v [T, Dv] -> out [T, Dv].
std::vector<double> attention_forward_ref(const std::vector<double>& q,
                                          const std::vector<double>& k,
                                          const std::vector<double>& v, int64_t T, int64_t Dk,
                                          int64_t Dv) {
  std::vector<double> out(T * Dv, 0.0);
  for (int64_t n = 0; n < T; ++n) {
    const std::vector<double> p = softmax_row(q, k, n, Dk);
    for (int64_t j = 0; j <= n; ++j)
      for (int64_t c = 0; c < Dv; ++c) out[n * Dv + c] += p[j] * v[j * Dv + c];
  }
  return out;
}

// Its gradient for the loss sum(out * d_out), written out from the softmax Jacobian.
void attention_backward_ref(const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, const std::vector<double>& d_out,
                            int64_t T, int64_t Dk, int64_t Dv, std::vector<double>& dq,
                            std::vector<double>& dk, std::vector<double>& dv) {
  dq.assign(T * Dk, 0), dk.assign(T * Dk, 0), dv.assign(T * Dv, 0);
  const double scale = 1 / std::sqrt(double(Dk));
  for (int64_t n = 0; n < T; ++n) {
    const std::vector<double> p = softmax_row(q, k, n, Dk);
    std::vector<double> dp(n + 1);
    double D = 0;  // sum_j p_j dp_j
    for (int64_t j = 0; j <= n; ++j) {
      dp[j] = 0;
      for (int64_t c = 0; c < Dv; ++c) {
        dp[j] += d_out[n * Dv + c] * v[j * Dv + c];
        dv[j * Dv + c] += p[j] * d_out[n * Dv + c];
      }
      D += p[j] * dp[j];
    }
    for (int64_t j = 0; j <= n; ++j) {
      const double ds = p[j] * (dp[j] - D) * scale;
      retnet::test::add_score_gradient(ds, &q[n * Dk], &k[j * Dk], &dq[n * Dk], &dk[j * Dk], Dk);
    }
  }
}

}  // namespace

TEST(AttentionBackward, ReferenceMatchesFiniteDifferences) {
  const int64_t T = 7, Dk = 4, Dv = 3;
  auto q = to_double(random_vector(T * Dk, 1, 2.0)), k = to_double(random_vector(T * Dk, 2));
  auto v = to_double(random_vector(T * Dv, 3)), d_out = to_double(random_vector(T * Dv, 4));
  std::vector<double> dq, dk, dv;
  attention_backward_ref(q, k, v, d_out, T, Dk, Dv, dq, dk, dv);
  auto loss = [&] {
    auto o = attention_forward_ref(q, k, v, T, Dk, Dv);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * d_out[i];
    return s;
  };
  for (auto [x, g] : {std::pair{&q, &dq}, {&k, &dk}, {&v, &dv}})
    EXPECT_TRUE(close(*g, finite_differences(loss, *x), 1e-6));
}

TEST(AttentionBackward, MatchesTheDoubleGradient) {
  // B * H = 1 takes the key-tiles-in-parallel schedule (partial dQ per thread), the others the
  // heads-in-parallel one.
  for (auto [B, T, H, Dk, Dv, tile] : {std::array<int64_t, 6>{1, 1, 1, 4, 4, 64},
                                       {1, 45, 1, 8, 6, 8},
                                       {2, 23, 3, 8, 6, 5},
                                       {1, 70, 2, 16, 8, 32},
                                       {1, 130, 1, 64, 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " H " << H << " tile " << tile);
    AttentionProblem p(B, T, H, Dk, Dv, 50 + T);
    auto d_out = random_vector(B * T * H * Dv, 60 + T);
    std::vector<double> eq(p.q.size()), ek(p.k.size()), ev(p.v.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> dq, dk, dv;
        attention_backward_ref(to_double(p.head(p.q, Dk, b, h)), to_double(p.head(p.k, Dk, b, h)),
                               to_double(p.head(p.v, Dv, b, h)), to_double(p.head(d_out, Dv, b, h)),
                               T, Dk, Dv, dq, dk, dv);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < Dk; ++i) {
            eq[((b * T + t) * H + h) * Dk + i] = dq[t * Dk + i];
            ek[((b * T + t) * H + h) * Dk + i] = dk[t * Dk + i];
          }
          for (int64_t i = 0; i < Dv; ++i) ev[((b * T + t) * H + h) * Dv + i] = dv[t * Dv + i];
        }
      }
    std::vector<float> lse;
    auto out = p.forward(tile, &lse);
    std::vector<float> dq(p.q.size(), 0.f), dk(p.k.size(), 0.f), dv(p.v.size(), 0.f);
    AttentionGradArgs g;
    g.q = p.view(p.q, Dk), g.k = p.view(p.k, Dk), g.v = p.view(p.v, Dv);
    g.out = p.view(out, Dv), g.d_out = p.view(d_out, Dv);
    g.d_q = p.view(dq, Dk), g.d_k = p.view(dk, Dk), g.d_v = p.view(dv, Dv);
    g.logsumexp = lse.data();
    g.tile = tile;
    Arena arena(attention_backward_workspace_floats(B, T, H, Dk, Dv, tile));
    attention_backward(g, arena);
    ASSERT_TRUE(retnet::test::second_call_doubles(
        [&] {
          arena.reset();
          attention_backward(g, arena);
        },
        dq, {&dq, &dk, &dv}));
    EXPECT_TRUE(close(dq, eq, 1e-4)) << "dq";
    EXPECT_TRUE(close(dk, ek, 1e-4)) << "dk";
    EXPECT_TRUE(close(dv, ev, 1e-4)) << "dv";
  }
}

// ---- KV cache ------------------------------------------------------------------------------
namespace {

using OwnedAttentionCache = retnet::test::OwnedCache<AttentionCache>;

}  // namespace

TEST(AttentionCache, StepByStepEqualsTheTiledForward) {
  const int64_t B = 2, T = 37, H = 2, Dk = 8, Dv = 6;
  AttentionProblem p(B, T, H, Dk, Dv, 21);
  const auto want = p.forward(16);
  OwnedAttentionCache c(B);
  std::vector<float> out(B * T * H * Dv, NAN);
  Arena arena(attention_step_workspace_floats(B, H, Dv));
  for (int64_t t = 0; t < T; ++t) {
    attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, 1);  // grows 16 -> 32 -> 64
    arena.reset();
    attention_step(attention_time_slice(p.q, B, T, H, Dk, t, 1),
                   attention_time_slice(p.k, B, T, H, Dk, t, 1),
                   attention_time_slice(p.v, B, T, H, Dv, t, 1),
                   attention_time_slice(out, B, T, H, Dv, t, 1), c.cache, arena);
  }
  EXPECT_EQ(c.length, (std::vector<int64_t>{T, T}));
  EXPECT_EQ(c.cache.capacity, 64);
  EXPECT_TRUE(close(out, want, 1e-5));
  EXPECT_TRUE(close(out, p.reference(), 1e-5));
}

TEST(AttentionCache, SlidingWindowInEveryKernelMatchesTheReference) {
  // A query sees the last W keys: the tiled forward (tiles shorter and longer than W), a step at
  // a time, and a prefill in two pieces all equal the double definition.
  const int64_t B = 2, T = 45, H = 2, Dk = 8, Dv = 6;
  for (int64_t W : {1, 5, 16, 44}) {
    SCOPED_TRACE(::testing::Message() << "window " << W);
    AttentionProblem p(B, T, H, Dk, Dv, 31 + W);
    p.window = W;
    const auto want = p.reference();
    for (int64_t tile : {4, 16, 64}) EXPECT_TRUE(close(p.forward(tile), want, 1e-5)) << tile;
    OwnedAttentionCache c(B);
    std::vector<float> out(B * T * H * Dv, NAN);
    Arena arena(attention_step_workspace_floats(B, H, Dv) + attention_workspace_floats(T, Dk, Dv, 8));
    attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, T);
    const int64_t split = 19;
    attention_prefill(attention_time_slice(p.q, B, T, H, Dk, 0, split),
                      attention_time_slice(p.k, B, T, H, Dk, 0, split),
                      attention_time_slice(p.v, B, T, H, Dv, 0, split),
                      attention_time_slice(out, B, T, H, Dv, 0, split), c.cache, arena, 8, W);
    for (int64_t t = split; t < T; ++t) {
      arena.reset();
      attention_step(attention_time_slice(p.q, B, T, H, Dk, t, 1),
                     attention_time_slice(p.k, B, T, H, Dk, t, 1),
                     attention_time_slice(p.v, B, T, H, Dv, t, 1),
                     attention_time_slice(out, B, T, H, Dv, t, 1), c.cache, arena, W);
    }
    EXPECT_TRUE(close(out, want, 1e-5));
  }
  // The window changes the function (else the test above could not fail).
  AttentionProblem p(1, 30, 1, 4, 4, 5);
  const auto all = p.reference();
  p.window = 3;
  EXPECT_FALSE(close(p.reference(), all, 1e-3));
}

TEST(AttentionCache, LongStepCrossesDecodeBlocks) {
  // 600 cached tokens: the step splits them across threads and each split folds several blocks.
  const int64_t B = 1, T = 600, H = 1, Dk = 16, Dv = 16;
  AttentionProblem p(B, T, H, Dk, Dv, 33);
  OwnedAttentionCache c(B);
  attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, T);
  std::vector<float> out(B * T * H * Dv, NAN);
  Arena arena(attention_workspace_floats(T, Dk, Dv, kAttentionDefaultTile) +
              attention_step_workspace_floats(B, H, Dv));
  attention_prefill(attention_time_slice(p.q, B, T, H, Dk, 0, T - 1),
                    attention_time_slice(p.k, B, T, H, Dk, 0, T - 1),
                    attention_time_slice(p.v, B, T, H, Dv, 0, T - 1),
                    attention_time_slice(out, B, T, H, Dv, 0, T - 1), c.cache, arena);
  arena.reset();
  attention_step(attention_time_slice(p.q, B, T, H, Dk, T - 1, 1),
                 attention_time_slice(p.k, B, T, H, Dk, T - 1, 1),
                 attention_time_slice(p.v, B, T, H, Dv, T - 1, 1),
                 attention_time_slice(out, B, T, H, Dv, T - 1, 1), c.cache, arena);
  EXPECT_TRUE(close(out, p.reference(), 1e-5));
}

TEST(AttentionCache, ChunkedPrefillEqualsOnePass) {
  const int64_t B = 2, T = 45, H = 3, Dk = 8, Dv = 4;
  AttentionProblem p(B, T, H, Dk, Dv, 5);
  const auto want = p.forward(64);
  for (auto chunks : {std::vector<int64_t>{T}, {7, 1, 20, 17}, {16, 16, 13}}) {
    OwnedAttentionCache c(B);
    std::vector<float> out(B * T * H * Dv, NAN);
    Arena arena(attention_workspace_floats(T, Dk, Dv, 8));
    int64_t t0 = 0;
    for (int64_t n : chunks) {
      attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, n);
      arena.reset();
      attention_prefill(attention_time_slice(p.q, B, T, H, Dk, t0, n),
                        attention_time_slice(p.k, B, T, H, Dk, t0, n),
                        attention_time_slice(p.v, B, T, H, Dv, t0, n),
                        attention_time_slice(out, B, T, H, Dv, t0, n), c.cache, arena, 8);
      t0 += n;
    }
    EXPECT_EQ(c.length, (std::vector<int64_t>{T, T}));
    EXPECT_TRUE(close(out, want, 1e-5)) << "first chunk " << chunks[0];
  }
}

TEST(AttentionChunkwise, ChunksAgainstTheCacheMatchTheReference) {
  // The chunkwise form after a prefill of P tokens (so the first chunk already has a cache):
  // chunks that divide the rest, that don't, of one token and longer than it; with a window.
  const int64_t B = 2, H = 2, Dk = 8, Dv = 6;
  for (int64_t T : {1, 30}) {
    for (int64_t W : {0, 5}) {
      AttentionProblem p(B, T, H, Dk, Dv, 41 + T + W);
      p.window = W;
      const auto want = p.reference();
      const int64_t P = T > 1 ? 6 : 0;
      for (int64_t chunk : {1, 4, 7, 24, 64}) {
        SCOPED_TRACE(::testing::Message() << "T " << T << ", window " << W << ", chunk " << chunk);
        OwnedAttentionCache c(B);
        std::vector<float> out(B * T * H * Dv, NAN);
        Arena arena(attention_workspace_floats(T, Dk, Dv, 8));
        attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, T);
        if (P > 0)
          attention_prefill(attention_time_slice(p.q, B, T, H, Dk, 0, P),
                            attention_time_slice(p.k, B, T, H, Dk, 0, P),
                            attention_time_slice(p.v, B, T, H, Dv, 0, P),
                            attention_time_slice(out, B, T, H, Dv, 0, P), c.cache, arena, 8, W);
        arena.reset();
        attention_chunkwise(attention_time_slice(p.q, B, T, H, Dk, P, T - P),
                            attention_time_slice(p.k, B, T, H, Dk, P, T - P),
                            attention_time_slice(p.v, B, T, H, Dv, P, T - P),
                            attention_time_slice(out, B, T, H, Dv, P, T - P), c.cache, arena, chunk,
                            8, W);
        EXPECT_EQ(c.length, (std::vector<int64_t>{T, T}));
        EXPECT_TRUE(close(out, want, 1e-5));
      }
    }
  }
}

TEST(AttentionCache, BatchedDecodeEqualsEachSequenceAlone) {
  // Sequence 1 is prefilled with 5 tokens on its own (a one-sequence cache over its block), then
  // both decode together at different lengths.
  const int64_t H = 2, Dk = 8, Dv = 8, T0 = 5, steps = 9, T = T0 + steps;
  AttentionProblem p0(1, T, H, Dk, Dv, 70), p1(1, T, H, Dk, Dv, 71);
  OwnedAttentionCache c(2);
  attention_cache_reserve(c.cache, c.storage, 2, H, Dk, Dv, T);
  AttentionCache second{c.cache.data + attention_cache_floats(H, Dk, Dv, c.cache.capacity),
                        c.cache.capacity, c.length.data() + 1};
  std::vector<float> out1(T * H * Dv, NAN), out0(steps * H * Dv, NAN);
  Arena arena(attention_workspace_floats(T, Dk, Dv, kAttentionDefaultTile) +
              attention_step_workspace_floats(2, H, Dv));
  attention_prefill(attention_time_slice(p1.q, 1, T, H, Dk, 0, T0),
                    attention_time_slice(p1.k, 1, T, H, Dk, 0, T0),
                    attention_time_slice(p1.v, 1, T, H, Dv, 0, T0),
                    attention_time_slice(out1, 1, T, H, Dv, 0, T0), second, arena);
  for (int64_t s = 0; s < steps; ++s) {
    // Batch rows: sequence 0 at token s, sequence 1 at token T0 + s.
    auto pack = [&](std::vector<float>& x0, std::vector<float>& x1, int64_t D) {
      std::vector<float> r(2 * H * D);
      std::copy_n(x0.begin() + s * H * D, H * D, r.begin());
      std::copy_n(x1.begin() + (T0 + s) * H * D, H * D, r.begin() + H * D);
      return r;
    };
    auto q = pack(p0.q, p1.q, Dk), k = pack(p0.k, p1.k, Dk), v = pack(p0.v, p1.v, Dv);
    std::vector<float> out(2 * H * Dv);
    arena.reset();
    attention_step(TensorView::contiguous(q.data(), {2, 1, H, Dk}),
                   TensorView::contiguous(k.data(), {2, 1, H, Dk}),
                   TensorView::contiguous(v.data(), {2, 1, H, Dv}),
                   TensorView::contiguous(out.data(), {2, 1, H, Dv}), c.cache, arena);
    std::copy_n(out.begin(), H * Dv, out0.begin() + s * H * Dv);
    std::copy_n(out.begin() + H * Dv, H * Dv, out1.begin() + (T0 + s) * H * Dv);
  }
  EXPECT_EQ(c.length, (std::vector<int64_t>{steps, T}));
  auto want0 = p0.reference(), want1 = p1.reference();
  EXPECT_TRUE(
      close(out0, std::vector<double>(want0.begin(), want0.begin() + steps * H * Dv), 1e-5));
  EXPECT_TRUE(close(out1, want1, 1e-5));
}

TEST(AttentionCache, FullCacheThrowsAndLeavesItUnchanged) {
  const int64_t B = 1, T = 3, H = 1, D = 4;
  AttentionProblem p(B, T, H, D, D, 9);
  std::vector<float> storage(attention_cache_floats(H, D, D, 2)), out(T * D);
  std::vector<int64_t> length{0};
  AttentionCache c{storage.data(), 2, length.data()};
  Arena arena(attention_workspace_floats(T, D, D, kAttentionDefaultTile));
  try {
    attention_prefill(p.view(p.q, D), p.view(p.k, D), p.view(p.v, D), p.view(out, D), c, arena);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capacity of 2 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(length[0], 0);
}

TEST(AttentionCache, ReserveDoublesAndKeepsEveryRow) {
  const int64_t B = 3, H = 2, Dk = 3, Dv = 5;
  OwnedAttentionCache c(B);
  attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, 10);
  const int64_t row = attention_cache_floats(H, Dk, Dv, 1);
  EXPECT_EQ(c.cache.capacity, 16);
  c.length = {16, 3, 9};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.length[b] * row; ++i)
      c.storage[b * 16 * row + i] = float(b * 1000 + i);
  attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, 0);  // room enough: nothing moves
  EXPECT_EQ(c.cache.capacity, 16);
  attention_cache_reserve(c.cache, c.storage, B, H, Dk, Dv, 1);
  EXPECT_EQ(c.cache.capacity, 32);
  EXPECT_EQ(c.cache.data, c.storage.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.length[b] * row; ++i)
      ASSERT_EQ(c.storage[b * 32 * row + i], float(b * 1000 + i)) << "sequence " << b;
}
