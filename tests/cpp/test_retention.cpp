// Retention op: the four forms against a double-precision recurrence of the definition, over
// shapes, chunk sizes that divide T and that don't, continuation from a state, and long sequences.
#include <cmath>

#include "retnet/core/error.h"
#include "retnet/mixers/retention.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {

struct RetentionProblem : HeadInputs {
  std::vector<double> gammas;

  RetentionProblem(int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, uint64_t seed,
                   double qk_scale)
      : HeadInputs(b, t, h, dk, dv, seed, qk_scale, qk_scale / std::sqrt(double(dk))) {
    for (int64_t i = 0; i < H; ++i) gammas.push_back(1.0 - std::exp2(-5.0 - i));
  }

  // Runs `form` from an empty state; returns out [B, T, H, Dv].
  std::vector<float> run(Form form, int64_t chunk = 64, int64_t tile = 0) {
    std::vector<float> out(B * T * H * Dv, NAN);
    std::vector<float> state(B * H * retention_state_floats_per_head(Dk, Dv), 0.f);
    RetentionArgs a;
    a.q = view(q, Dk);
    a.k = view(k, Dk);
    a.v = view(v, Dv);
    a.out = view(out, Dv);
    a.gammas = gammas.data();
    a.state = state.data();
    a.state_stride = H * retention_state_floats_per_head(Dk, Dv);
    a.chunk = chunk;
    a.scan_tile = tile;
    Arena arena(retention_workspace_floats(form, B, T, H, Dk, Dv, chunk, tile));
    retention_forward(form, a, arena);
    return out;
  }

  // The double-precision recurrence, laid out like run()'s output.
  std::vector<double> reference() {
    std::vector<double> out(B * T * H * Dv);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<float> qh(T * Dk), kh(T * Dk), vh(T * Dv);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < Dk; ++i) {
            qh[t * Dk + i] = q[((b * T + t) * H + h) * Dk + i];
            kh[t * Dk + i] = k[((b * T + t) * H + h) * Dk + i];
          }
          for (int64_t j = 0; j < Dv; ++j) vh[t * Dv + j] = v[((b * T + t) * H + h) * Dv + j];
        }
        std::vector<double> oh(T * Dv);
        retention_reference(qh.data(), kh.data(), vh.data(), oh.data(), T, Dk, Dv, gammas[h]);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < Dv; ++j) out[((b * T + t) * H + h) * Dv + j] = oh[t * Dv + j];
      }
    return out;
  }
};

}  // namespace

TEST(Retention, DecaySumIsStable) {
  EXPECT_DOUBLE_EQ(retention_decay_sum(0.5, 0), 1.0);
  EXPECT_NEAR(retention_decay_sum(0.5, 2), 1.75, 1e-15);
  double g = 1.0 - std::exp2(-12);
  EXPECT_NEAR(retention_decay_sum(g, 10'000'000), 1.0 / (1.0 - g), 1e-9 / (1.0 - g));
}

TEST(Retention, AllFormsMatchDoubleReference) {
  for (auto [B, T, H, Dk, Dv] : {std::array<int64_t, 5>{1, 1, 1, 4, 4},
                                 {2, 7, 3, 8, 6},
                                 {1, 64, 2, 16, 16},
                                 {3, 100, 4, 8, 12}}) {
    for (double qk_scale : {0.5, 4.0}) {
      RetentionProblem p(B, T, H, Dk, Dv, 11 + T, qk_scale);
      auto ref = p.reference();
      SCOPED_TRACE(::testing::Message() << "B" << B << " T" << T << " H" << H << " scale " << qk_scale);
      EXPECT_TRUE(close(p.run(Form::Parallel), ref, 1e-5)) << "parallel";
      EXPECT_TRUE(close(p.run(Form::Recurrent), ref, 1e-5)) << "recurrent";
      for (int64_t chunk : {1, 3, 16, 64, 1000})
        EXPECT_TRUE(close(p.run(Form::Chunkwise, chunk), ref, 1e-5)) << "chunk " << chunk;
      for (int64_t tile : {0, 1, 5, 64})
        EXPECT_TRUE(close(p.run(Form::Scan, 64, tile), ref, 1e-5)) << "tile " << tile;
    }
  }
}

// Heads whose state streams from memory at every step (256 KiB and more: 128 x 513 floats) take the
// recurrent form row by row, smaller ones by groups of columns: both orders, next to each other and
// to the reference, over several tokens (a state carried between steps) and two threads' heads.
TEST(Retention, RecurrentFormMatchesOnLargeHeads) {
  for (int64_t Dk : {int64_t{127}, int64_t{128}}) {
    RetentionProblem p(1, 6, 3, Dk, 512, 7, 4.0);
    auto ref = p.reference();
    SCOPED_TRACE(::testing::Message() << "Dk " << Dk);
    EXPECT_TRUE(close(p.run(Form::Recurrent), ref, 1e-5));
    EXPECT_TRUE(close(p.run(Form::Chunkwise, 4), ref, 1e-5));
  }
}

// The test data must exercise both branches of the score normalisation max(|r_n| / sqrt(S_n), 1).
TEST(Retention, TestDataCoversBothNormalisationBranches) {
  RetentionProblem small(1, 100, 1, 8, 8, 5, 0.5), large(1, 100, 1, 8, 8, 5, 4.0);
  auto fraction_clamped = [](RetentionProblem& p) {
    // With v = 1 the un-normalised output equals the row sum: detect rows where it exceeds sqrt(S).
    std::vector<float> ones(p.v.size(), 1.f);
    std::swap(p.v, ones);
    auto out = p.run(Form::Recurrent);
    std::swap(p.v, ones);
    int clamped = 0;
    for (float o : out) clamped += std::fabs(std::fabs(o) - 1.f) < 1e-5f;
    return double(clamped) / out.size();
  };
  double fs = fraction_clamped(small), fl = fraction_clamped(large);
  EXPECT_LT(fs, 0.9) << fs;
  EXPECT_GT(fl, 0.1) << fl;
  EXPECT_LT(fl, 0.99) << fl;
}

TEST(Retention, ContinuesFromAState) {
  // Feeding [0, T1) and then [T1, T) through the state equals one pass over [0, T).
  RetentionProblem p(2, 50, 2, 8, 8, 3, 2.0);
  auto whole = p.run(Form::Recurrent);
  for (Form form : {Form::Recurrent, Form::Chunkwise, Form::Scan}) {
    std::vector<float> out(whole.size(), NAN);
    const int64_t S = p.H * retention_state_floats_per_head(p.Dk, p.Dv);
    std::vector<float> state(p.B * S, 0.f);
    const int64_t T1 = 23;
    for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, T1}, {T1, p.T}}) {
      auto part = [&, t0 = t0, t1 = t1](std::vector<float>& x, int64_t D) {
        TensorView t = TensorView::contiguous(x.data(), {p.B, p.T, p.H, D});
        return t.slice(1, t0, t1);
      };
      RetentionArgs a;
      a.q = part(p.q, p.Dk);
      a.k = part(p.k, p.Dk);
      a.v = part(p.v, p.Dv);
      a.out = part(out, p.Dv);
      a.gammas = p.gammas.data();
      a.state = state.data();
      a.state_stride = S;
      int64_t pos[2] = {t0, t0};
      a.positions = pos;
      a.chunk = 8;
      Arena arena(retention_workspace_floats(form, p.B, t1 - t0, p.H, p.Dk, p.Dv, 8, 0));
      retention_forward(form, a, arena);
    }
    EXPECT_TRUE(close(out, whole, 1e-5)) << form_name(form);
  }
}

TEST(Retention, RejectsBadArguments) {
  RetentionProblem p(1, 4, 1, 4, 4, 1, 1.0);
  std::vector<float> out(16);
  RetentionArgs a;
  a.q = p.view(p.q, 4);
  a.k = p.view(p.k, 4);
  a.v = p.view(p.v, 4);
  a.out = p.view(out, 4);
  a.gammas = p.gammas.data();
  Arena arena(1 << 16);
  EXPECT_THROW(retention_forward(Form::Recurrent, a, arena), Error);  // no state
  a.out = p.view(out, 2);
  EXPECT_THROW(retention_forward(Form::Parallel, a, arena), Error);  // shape mismatch
  EXPECT_THROW(parse_form("fast"), Error);
}

// T = 100,000: finite, and equal to the double recurrence (tolerance 1e-4: float32 rounding of a
// state that integrates ~4,000 steps at gamma = 1 - 2^-12; measured error is printed).
TEST(RetentionSlow, LongSequenceMatchesDoubleRecurrence) {
  const int64_t T = 100000, H = 8;
  RetentionProblem p(1, T, H, 8, 8, 99, 2.0);
  auto ref = p.reference();
  for (Form form : {Form::Recurrent, Form::Chunkwise, Form::Scan}) {
    auto out = p.run(form, 256);
    for (float o : out) ASSERT_TRUE(std::isfinite(o)) << form_name(form);
    double err = retnet::test::rel_max_error(out, ref);
    std::printf("T=%lld %s: relative max error vs double recurrence %.3g\n", (long long)T,
                form_name(form), err);
    EXPECT_TRUE(close(out, ref, 1e-4)) << form_name(form);
  }
}
