// Channel-wise decay attention (RWKV-4's WKV, AFT-simple): the three forms against a double
// definition and each other, continuation from a state in pieces, the zero state as the empty
// state, AFT-simple as a softmax-weighted average, huge keys, and gradients against central finite
// differences in double.
#include <cmath>
#include <functional>

#include "retnet/core/error.h"
#include "retnet/mixers/decay_attention.h"
#include "decay_problem.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {

struct DecayProblem : DecayInputs {
  DecayProblem(int64_t b, int64_t t, int64_t c, uint64_t seed, double k_scale = 1.0)
      : DecayInputs(b, t, c, seed, k_scale) {}
  int64_t state_per_sequence() const { return decay_attention_state_floats(C); }
  TensorView view(std::vector<float>& x) { return TensorView::contiguous(x.data(), {B, T, C}); }

  DecayAttentionArgs args(std::vector<float>& out, int64_t t0, int64_t t1) {
    DecayAttentionArgs a;
    a.r = view(r).slice(1, t0, t1);
    a.k = view(k).slice(1, t0, t1);
    a.v = view(v).slice(1, t0, t1);
    a.out = view(out).slice(1, t0, t1);
    a.w = w.data();
    a.u = u.data();
    return a;
  }
  // Runs tokens [t0, t1) of `form` through `state`; writes those rows of out.
  void run_span(Form form, int64_t chunk, int64_t t0, int64_t t1,
                std::vector<float>& state, std::vector<float>& out) {
    DecayAttentionArgs a = args(out, t0, t1);
    a.state = state.data();
    a.state_stride = state_per_sequence();
    a.chunk = chunk;
    Arena arena(decay_attention_workspace_floats(form, B, t1 - t0, C, chunk));
    decay_attention_forward(form, a, arena);
  }
  std::vector<float> run(Form form, int64_t chunk = 64) {
    std::vector<float> out(B * T * C, NAN), state(B * state_per_sequence(), 0.f);
    run_span(form, chunk, 0, T, state, out);
    return out;
  }
  // The double-precision definition, laid out like run()'s output.
  std::vector<double> reference() const {
    std::vector<double> out(B * T * C);
    for (int64_t b = 0; b < B; ++b)
      decay_attention_reference(&r[b * T * C], &k[b * T * C], &v[b * T * C], w.data(), u.data(),
                                &out[b * T * C], T, C);
    return out;
  }
};

void check_all_decay_forms(DecayProblem& p) {
  auto ref = p.reference();
  SCOPED_TRACE(::testing::Message() << "B" << p.B << " T" << p.T << " C" << p.C);
  expect_forms_match_reference(p, ref);
}

using DecayShape = std::array<int64_t, 3>;  // B, T, C
// Channel counts below, at and across the 32-channel block; T not a multiple of the chunks.
const DecayShape kDecayShapes[] = {{1, 1, 1}, {2, 7, 5}, {1, 64, 32}, {3, 50, 45}, {2, 37, 70}};

// The definition in double over double inputs, all sequences: for finite differences.
std::vector<double> decay_forward_double(const std::vector<double>& r, const std::vector<double>& k,
                                         const std::vector<double>& v, const std::vector<double>& w,
                                         const std::vector<double>& u, int64_t B, int64_t T,
                                         int64_t C) {
  std::vector<double> out(B * T * C), x(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t n = 0; n < T; ++n) {
        auto at = [&](int64_t t) { return (b * T + t) * C + c; };
        for (int64_t m = 0; m < n; ++m) x[m] = k[at(m)] - double(n - 1 - m) * w[c];
        x[n] = u[c] + k[at(n)];
        const double top = *std::max_element(x.begin(), x.begin() + n + 1);
        double num = 0, den = 0;
        for (int64_t m = 0; m <= n; ++m) {
          const double e = std::exp(x[m] - top);
          num += e * v[at(m)];
          den += e;
        }
        out[at(n)] = num / den / (1 + std::exp(-r[at(n)]));
      }
  return out;
}

struct Gradients {
  std::vector<float> dr, dk, dv, dw, du;
};

// Forward with saved buffers, then backward (twice, checking that it accumulates; halved).
Gradients run_backward(DecayProblem& p, Form form, int64_t chunk, std::vector<float>& d_out) {
  const int64_t n = p.B * p.T * p.C;
  std::vector<float> out(n), wkv(n), log_den(n), state(p.B * p.state_per_sequence(), 0.f);
  DecayAttentionArgs fa = p.args(out, 0, p.T);
  fa.state = state.data(), fa.state_stride = p.state_per_sequence(), fa.chunk = chunk;
  fa.saved_wkv = wkv.data(), fa.saved_log_denominators = log_den.data();
  Arena arena(std::max(decay_attention_workspace_floats(form, p.B, p.T, p.C, chunk),
                       decay_attention_backward_workspace_floats(form, p.B, p.T, p.C, chunk)));
  decay_attention_forward(form, fa, arena);
  Gradients g{std::vector<float>(n, 0.f), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f),
              std::vector<float>(p.C, 0.f), std::vector<float>(p.C, 0.f)};
  DecayAttentionGradArgs ga;
  ga.r = fa.r, ga.k = fa.k, ga.v = fa.v,
  ga.d_out = TensorView::contiguous(d_out.data(), {p.B, p.T, p.C});
  ga.d_r = p.view(g.dr), ga.d_k = p.view(g.dk), ga.d_v = p.view(g.dv);
  ga.w = p.w.data(), ga.u = p.u.data(), ga.d_w = g.dw.data(), ga.d_u = g.du.data();
  ga.wkv = wkv.data(), ga.log_denominators = log_den.data();
  ga.chunk = chunk;
  arena.reset();
  decay_attention_backward(form, ga, arena);
  const Gradients once = g;
  arena.reset();
  decay_attention_backward(form, ga, arena);
  for (auto [twice, single] : {std::pair{&g.dr, &once.dr},
                               {&g.dk, &once.dk},
                               {&g.dv, &once.dv},
                               {&g.dw, &once.dw},
                               {&g.du, &once.du}}) {
    EXPECT_TRUE(retnet::test::doubled(*twice, *single));
    for (float& x : *twice) x *= 0.5f;
  }
  return g;
}

void check_decay_gradients(DecayProblem& p) {
  auto d_out = random_vector(p.B * p.T * p.C, 77);
  auto r = test::to_double(p.r), k = test::to_double(p.k), v = test::to_double(p.v),
       w = test::to_double(p.w), u = test::to_double(p.u);
  auto loss = [&] {
    auto o = decay_forward_double(r, k, v, w, u, p.B, p.T, p.C);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * d_out[i];
    return s;
  };
  const auto er = finite_differences(loss, r), ek = finite_differences(loss, k),
             ev = finite_differences(loss, v), ew = finite_differences(loss, w),
             eu = finite_differences(loss, u);
  for (Form form : {Form::Parallel, Form::Chunkwise})
    for (int64_t chunk : {int64_t{1}, int64_t{5}, p.T}) {
      if (form == Form::Parallel && chunk != p.T) continue;
      SCOPED_TRACE(::testing::Message() << form_name(form) << " chunk " << chunk
                                        << " B" << p.B << " T" << p.T << " C" << p.C);
      const Gradients g = run_backward(p, form, chunk, d_out);
      EXPECT_TRUE(close(g.dr, er, 1e-4)) << "dr";
      EXPECT_TRUE(close(g.dk, ek, 1e-4)) << "dk";
      EXPECT_TRUE(close(g.dv, ev, 1e-4)) << "dv";
      EXPECT_TRUE(close(g.dw, ew, 1e-4)) << "dw";
      EXPECT_TRUE(close(g.du, eu, 1e-4)) << "du";
    }
}

}  // namespace

TEST(DecayAttention, AllFormsMatchDoubleReference) {
  for (const DecayShape& s : kDecayShapes) {
    DecayProblem p(s[0], s[1], s[2], 11 + s[1]);
    check_all_decay_forms(p);
  }
}

TEST(DecayAttention, LargeDecaysAndBonuses) {
  // w up to 50 (the previous token alone matters), u of +-20 (the current token alone, or not).
  DecayProblem p(2, 40, 40, 8);
  for (int64_t c = 0; c < p.C; ++c) {
    p.w[c] = c % 3 == 0 ? 50.f * p.w[c] : p.w[c];
    p.u[c] = c % 4 == 1 ? 20.f : (c % 4 == 2 ? -20.f : p.u[c]);
  }
  check_all_decay_forms(p);
}

TEST(DecayAttention, ContinuesFromAStateInPieces) {
  // Recurrent, then chunkwise (chunk 8 over 29 tokens: a short last chunk), then recurrent again,
  // equals one pass; so does every other split of forms.
  DecayProblem p(2, 50, 40, 3);
  const auto whole = p.reference();
  const Form plans[][3] = {{Form::Recurrent, Form::Chunkwise, Form::Recurrent},
                                         {Form::Chunkwise, Form::Recurrent, Form::Chunkwise},
                                         {Form::Chunkwise, Form::Chunkwise, Form::Chunkwise}};
  for (const auto& plan : plans) {
    std::vector<float> out(whole.size(), NAN), state(p.B * p.state_per_sequence(), 0.f);
    p.run_span(plan[0], 8, 0, 1, state, out);
    p.run_span(plan[1], 8, 1, 30, state, out);
    p.run_span(plan[2], 8, 30, p.T, state, out);
    EXPECT_TRUE(close(out, whole, 1e-5))
        << form_name(plan[0]) << ", " << form_name(plan[1]) << ", "
        << form_name(plan[2]);
  }
  // The state left behind is the same whichever form wrote it.
  std::vector<float> s_rec(p.B * p.state_per_sequence(), 0.f), s_chunk = s_rec, out(whole.size());
  p.run_span(Form::Recurrent, 8, 0, p.T, s_rec, out);
  p.run_span(Form::Chunkwise, 8, 0, p.T, s_chunk, out);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t c = 0; c < p.C; ++c) {
      // Sums a e^p and b e^p compared through their ratio and the log of b e^p.
      const float* r = &s_rec[b * p.state_per_sequence()];
      const float* q = &s_chunk[b * p.state_per_sequence()];
      EXPECT_NEAR(r[c] / r[p.C + c], q[c] / q[p.C + c], 1e-5);
      EXPECT_NEAR(r[2 * p.C + c] + std::log(r[p.C + c]), q[2 * p.C + c] + std::log(q[p.C + c]),
                  1e-4);
    }
}

TEST(DecayAttention, ContinuesFromAGivenState) {
  // A state from the first 20 tokens, handed to the double reference for the rest.
  DecayProblem p(1, 45, 33, 21);
  std::vector<float> state(p.state_per_sequence(), 0.f), out(p.T * p.C, NAN);
  p.run_span(Form::Recurrent, 8, 0, 20, state, out);
  const std::vector<double> s0(state.begin(), state.end());
  std::vector<double> want((p.T - 20) * p.C);
  decay_attention_reference(&p.r[20 * p.C], &p.k[20 * p.C], &p.v[20 * p.C], p.w.data(), p.u.data(),
                            want.data(), p.T - 20, p.C, s0.data());
  for (Form form : {Form::Recurrent, Form::Chunkwise}) {
    std::vector<float> s = state, o(p.T * p.C, NAN);
    p.run_span(form, 7, 20, p.T, s, o);
    EXPECT_TRUE(close(std::vector<float>(o.begin() + 20 * p.C, o.end()), want, 1e-5))
        << form_name(form);
  }
}

TEST(DecayAttention, ZeroStateIsTheEmptyState) {
  // An all-zero state block (what the engine allocates) must not pose as a sum with maximum
  // exponent 0: with keys of -1e4 and -50 that would underflow every term and give 0 / 0.
  DecayProblem p(2, 20, 36, 5);
  for (size_t i = 0; i < p.k.size(); ++i) p.k[i] += (i % 2 ? -1e4f : -50.f);
  const auto ref = p.reference();
  const auto parallel = p.run(Form::Parallel);  // never touches a state
  EXPECT_TRUE(close(parallel, ref, 1e-5));
  for (Form form : {Form::Recurrent, Form::Chunkwise}) {
    auto out = p.run(form, 6);  // from std::vector<float>(n, 0.f)
    EXPECT_TRUE(close(out, ref, 1e-5)) << form_name(form);
  }
  // And a state that went through tokens is not empty: b >= 1 (its largest term is e^0).
  std::vector<float> state(p.B * p.state_per_sequence(), 0.f), out(p.k.size());
  p.run_span(Form::Recurrent, 6, 0, 1, state, out);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t c = 0; c < p.C; ++c) EXPECT_GE(state[b * p.state_per_sequence() + p.C + c], 1.f);
}

TEST(DecayAttention, ZeroDecayAndBonusIsAftSimple) {
  // AFT-simple: out_n = sigmoid(q_n) * sum_{m<=n} softmax_m(k) v_m, directly.
  DecayProblem p(2, 30, 20, 9, 3.0);
  std::fill(p.w.begin(), p.w.end(), 0.f);
  std::fill(p.u.begin(), p.u.end(), 0.f);
  std::vector<double> want(p.k.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t n = 0; n < p.T; ++n) {
        auto at = [&](int64_t t) { return (b * p.T + t) * p.C + c; };
        double top = -1e300, num = 0, den = 0;
        for (int64_t m = 0; m <= n; ++m) top = std::max(top, double(p.k[at(m)]));
        for (int64_t m = 0; m <= n; ++m) {
          const double e = std::exp(p.k[at(m)] - top);
          num += e * p.v[at(m)];
          den += e;
        }
        want[at(n)] = num / den / (1 + std::exp(-double(p.r[at(n)])));
      }
  for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise})
    EXPECT_TRUE(close(p.run(form, 7), want, 1e-5)) << form_name(form);
}

TEST(DecayAttention, HugeKeysStayFiniteAndCorrect) {
  for (double scale : {1e2, 1e4}) {
    DecayProblem p(2, 40, 40, 12, scale);
    SCOPED_TRACE(::testing::Message() << "key scale " << scale);
    const auto ref = p.reference();
    for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise}) {
      auto out = p.run(form, 6);
      for (float o : out) ASSERT_TRUE(std::isfinite(o)) << form_name(form);
      EXPECT_TRUE(close(out, ref, 1e-5)) << form_name(form);
    }
  }
  // Keys of +-1e4 plus small differences: the terms compete, and the exponents sit where float
  // resolves 1e-3. Without its rounding compensation the recurrent form's p -= w drifts by up to
  // 5e-4 a token here (measured 2.6e-4 relative error over 20 tokens).
  for (float base : {1e4f, -1e4f}) {
    DecayProblem p(1, 300, 40, 13);
    for (float& x : p.k) x += base;
    SCOPED_TRACE(::testing::Message() << "keys around " << base);
    const auto ref = p.reference();
    for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise})
      EXPECT_TRUE(close(p.run(form, 6), ref, 1e-5)) << form_name(form);
  }
}

TEST(DecayAttention, StridedViews) {
  // r, k, v as column slices of one [B, T, 3C] projection, out into a wider buffer.
  const int64_t B = 2, T = 19, C = 37;
  DecayProblem p(B, T, C, 31);
  std::vector<float> rkv(B * T * 3 * C), wide(B * T * (C + 5), NAN);
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t c = 0; c < C; ++c) {
      rkv[i * 3 * C + c] = p.r[i * C + c];
      rkv[i * 3 * C + C + c] = p.k[i * C + c];
      rkv[i * 3 * C + 2 * C + c] = p.v[i * C + c];
    }
  auto all = TensorView::contiguous(rkv.data(), {B, T, 3 * C});
  const auto ref = p.reference();
  for (Form form : {Form::Parallel, Form::Recurrent, Form::Chunkwise}) {
    DecayAttentionArgs a;
    a.r = all.slice(2, 0, C), a.k = all.slice(2, C, 2 * C), a.v = all.slice(2, 2 * C, 3 * C);
    a.out = TensorView::contiguous(wide.data(), {B, T, C + 5}).slice(2, 0, C);
    a.w = p.w.data(), a.u = p.u.data();
    std::vector<float> state(B * (p.state_per_sequence() + 3), 0.f);
    a.state = state.data(), a.state_stride = p.state_per_sequence() + 3;
    a.chunk = 5;
    Arena arena(decay_attention_workspace_floats(form, B, T, C, a.chunk));
    decay_attention_forward(form, a, arena);
    std::vector<float> out(B * T * C);
    for (int64_t i = 0; i < B * T; ++i)
      for (int64_t c = 0; c < C; ++c) out[i * C + c] = wide[i * (C + 5) + c];
    EXPECT_TRUE(close(out, ref, 1e-5)) << form_name(form);
  }
}

TEST(DecayAttention, RejectsBadArguments) {
  DecayProblem p(1, 4, 4, 1);
  std::vector<float> out(16);
  DecayAttentionArgs a = p.args(out, 0, 4);
  Arena arena(1 << 16);
  EXPECT_THROW(decay_attention_forward(Form::Recurrent, a, arena), Error);  // no state
  a.out = TensorView::contiguous(out.data(), {1, 4, 3});
  EXPECT_THROW(decay_attention_forward(Form::Parallel, a, arena), Error);  // shape mismatch
  a.out = p.view(out);
  a.w = nullptr;
  EXPECT_THROW(decay_attention_forward(Form::Parallel, a, arena), Error);  // no decay
  a.w = p.w.data();
  a.chunk = 0;
  std::vector<float> state(p.state_per_sequence(), 0.f);
  a.state = state.data();
  EXPECT_THROW(decay_attention_forward(Form::Chunkwise, a, arena), Error);  // chunk 0
  a.chunk = 4;
  EXPECT_THROW(decay_attention_forward(Form::Scan, a, arena), Error);  // no scan form
  EXPECT_EQ(parse_form("chunkwise"), Form::Chunkwise);
}

TEST(DecayAttention, GradientsMatchFiniteDifferences) {
  DecayProblem p(2, 13, 35, 41);
  check_decay_gradients(p);
}

TEST(DecayAttention, GradientsWithLargeDecaysBonusesAndKeys) {
  // Strong decays and bonuses, keys of scale 5: weights spanning e^{+-30} in one row.
  DecayProblem p(1, 12, 6, 42, 5.0);
  p.w = {0.f, 0.01f, 0.5f, 3.f, 10.f, 30.f};
  p.u = {0.f, -8.f, 8.f, 1.f, -1.f, 20.f};
  check_decay_gradients(p);
}

TEST(DecayAttention, BackwardParallelEqualsChunkwise) {
  DecayProblem p(2, 100, 70, 43, 2.0);
  auto d_out = random_vector(p.B * p.T * p.C, 78);
  const Gradients want = run_backward(p, Form::Parallel, p.T, d_out);
  for (int64_t chunk : {1, 7, 16, 64, 99}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    const Gradients g = run_backward(p, Form::Chunkwise, chunk, d_out);
    EXPECT_TRUE(close(g.dr, want.dr, 1e-5)) << "dr";
    EXPECT_TRUE(close(g.dk, want.dk, 1e-5)) << "dk";
    EXPECT_TRUE(close(g.dv, want.dv, 1e-5)) << "dv";
    EXPECT_TRUE(close(g.dw, want.dw, 1e-5)) << "dw";
    EXPECT_TRUE(close(g.du, want.du, 1e-5)) << "du";
  }
}

TEST(DecayAttention, BackwardWithHugeKeysStaysFinite) {
  DecayProblem p(1, 60, 40, 44, 1e4);
  auto d_out = random_vector(p.B * p.T * p.C, 79);
  const Gradients par = run_backward(p, Form::Parallel, p.T, d_out);
  const Gradients chunked = run_backward(p, Form::Chunkwise, 8, d_out);
  for (const Gradients* g : {&par, &chunked})
    for (const auto* x : {&g->dr, &g->dk, &g->dv, &g->dw, &g->du})
      for (float y : *x) ASSERT_TRUE(std::isfinite(y));
  EXPECT_TRUE(close(chunked.dv, par.dv, 1e-5));
  EXPECT_TRUE(close(chunked.dr, par.dr, 1e-5));
}
