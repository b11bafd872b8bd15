// Sequence parallel decay attention at the kernel level: a slice's record is the state its tokens
// leave, records of consecutive pieces combine into the whole's (associatively, at any key size),
// and a sequence run as three pieces, each from the combined records before it and sending its
// start state's gradient back, equals one pass in its outputs and every gradient.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "retnet/mixers/decay_attention.h"
#include "decay_problem.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace {

constexpr int64_t kRecordRows = kDecaySliceRecordRows;

// Random decay-mixer inputs (every use has C > 1, so channel 0 has no decay: AFT-simple's).
struct SliceProblem : DecayInputs {
  SliceProblem(int64_t b, int64_t t, int64_t c, uint64_t seed, double k_scale)
      : DecayInputs(b, t, c, seed, k_scale) {}
  TensorView view(std::vector<float>& x, int64_t t0, int64_t t1) {
    return TensorView::contiguous(x.data(), {B, T, C}).slice(1, t0, t1);
  }
  std::vector<float> record(int64_t t0, int64_t t1) {
    std::vector<float> rec(B * kRecordRows * C, NAN);
    decay_attention_slice_record(view(k, t0, t1), view(v, t0, t1), w.data(), rec.data(),
                                 kRecordRows * C);
    return rec;
  }
  std::vector<float> combined(std::vector<float> a, const std::vector<float>& b) const {
    decay_attention_combine_records(a.data(), b.data(), B, C, kRecordRows * C);
    return a;
  }
};

// Two records (or states, `stride` floats per sequence) hold the same sums: equal ratios a / b
// and equal log(b) + p.
void expect_same_sums(const std::vector<float>& got, const std::vector<float>& want, int64_t B,
                      int64_t C, int64_t stride, double tol) {
  for (int64_t s = 0; s < B; ++s)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = &got[s * stride];
      const float* e = &want[s * stride];
      ASSERT_GT(g[C + c], 0.f) << "sequence " << s << " channel " << c;
      ASSERT_TRUE(std::isfinite(g[c]) && std::isfinite(g[2 * C + c]));
      EXPECT_NEAR(g[c] / g[C + c], e[c] / e[C + c], tol) << s << ", " << c;
      const double lg = g[2 * C + c] + std::log(g[C + c]), le = e[2 * C + c] + std::log(e[C + c]);
      EXPECT_NEAR(lg, le, tol * std::max(1.0, std::fabs(le))) << s << ", " << c;
    }
}

void check_records_combine(double k_scale, float key_offset) {
  SliceProblem p(2, 41, 37, 7, k_scale);
  for (float& x : p.k) x += key_offset;
  for (int64_t c = 0; c < p.C; c += 5) p.w[c] *= 30.f;  // some channels forget fast
  const auto whole = p.record(0, p.T);
  // The record is the state the chunkwise form leaves from an empty state, and -T w.
  std::vector<float> state(p.B * decay_attention_state_floats(p.C), 0.f), out(p.k.size());
  DecayAttentionArgs a;
  a.r = p.view(p.r, 0, p.T), a.k = p.view(p.k, 0, p.T), a.v = p.view(p.v, 0, p.T);
  a.out = p.view(out, 0, p.T);
  a.w = p.w.data(), a.u = p.u.data();
  a.state = state.data(), a.state_stride = decay_attention_state_floats(p.C), a.chunk = 8;
  Arena arena(decay_attention_workspace_floats(Form::Chunkwise, p.B, p.T, p.C, 8));
  decay_attention_forward(Form::Chunkwise, a, arena);
  std::vector<float> whole_state(p.B * a.state_stride);
  for (int64_t s = 0; s < p.B; ++s)
    std::copy_n(&whole[s * kRecordRows * p.C], a.state_stride, &whole_state[s * a.state_stride]);
  expect_same_sums(whole_state, state, p.B, p.C, a.state_stride, 1e-5);
  for (int64_t s = 0; s < p.B; ++s)
    for (int64_t c = 0; c < p.C; ++c)
      EXPECT_FLOAT_EQ(whole[s * kRecordRows * p.C + 3 * p.C + c], -41.f * p.w[c]);
  // Pieces of 1, 18 and 22 tokens, grouped either way, and after the empty record.
  const auto r1 = p.record(0, 1), r2 = p.record(1, 19), r3 = p.record(19, p.T);
  std::vector<float> empty(whole.size());
  decay_attention_empty_records(empty.data(), p.B, p.C, kRecordRows * p.C);
  const auto left = p.combined(p.combined(r1, r2), r3);
  const auto right = p.combined(r1, p.combined(r2, r3));
  const auto after_empty = p.combined(p.combined(empty, r1), p.combined(r2, r3));
  for (const auto* got : {&left, &right, &after_empty}) {
    expect_same_sums(*got, whole, p.B, p.C, kRecordRows * p.C, 1e-5);
    for (int64_t s = 0; s < p.B; ++s)
      for (int64_t c = 0; c < p.C; ++c) {
        const int64_t at = s * kRecordRows * p.C + 3 * p.C + c;
        EXPECT_NEAR((*got)[at], whole[at], 1e-5 * std::fabs(whole[at]));
      }
  }
}

TEST(DecaySlices, RecordsOfPiecesCombineIntoTheWholeRecord) { check_records_combine(1.0, 0.f); }

TEST(DecaySlices, RecordsCombineWithoutOverflowAtHugeKeys) {
  // e^{k} overflows float from k = 89: keys of 200 +- 60 only work through the scaled sums.
  check_records_combine(20.0, 200.f);
}

// One piece [t0, t1) of a sequence: its forward from `start` (records, kRecordRows * C per
// sequence; saved for the backward) and its backward; the gradients go to the problem's
// full-length buffers.
struct PieceGrads {
  std::vector<float> dr, dk, dv, dw, du;
  explicit PieceGrads(const SliceProblem& p)
      : dr(p.k.size(), 0.f), dk(dr), dv(dr), dw(p.C, 0.f), du(dw) {}
};

void run_piece(SliceProblem& p, std::vector<float>& d_out, int64_t t0, int64_t t1,
               const std::vector<float>* start, std::vector<float>* d_start,
               std::function<void()> leave, std::vector<float>& out, PieceGrads& g) {
  const int64_t L = t1 - t0, stride = kRecordRows * p.C, chunk = 8;
  std::vector<float> state(p.B * stride, 0.f), wkv(p.B * L * p.C), log_den(wkv.size());
  if (start) state = *start;
  DecayAttentionArgs a;
  a.r = p.view(p.r, t0, t1), a.k = p.view(p.k, t0, t1), a.v = p.view(p.v, t0, t1);
  a.out = p.view(out, t0, t1);
  a.w = p.w.data(), a.u = p.u.data();
  a.state = state.data(), a.state_stride = stride, a.chunk = chunk;
  a.saved_wkv = wkv.data(), a.saved_log_denominators = log_den.data();
  Arena arena(decay_attention_workspace_floats(Form::Chunkwise, p.B, L, p.C, chunk) +
              decay_attention_backward_workspace_floats(Form::Chunkwise, p.B, L, p.C, chunk));
  decay_attention_forward(Form::Chunkwise, a, arena);
  arena.reset();
  DecayAttentionGradArgs ga;
  ga.r = a.r, ga.k = a.k, ga.v = a.v, ga.d_out = p.view(d_out, t0, t1);
  ga.d_r = p.view(g.dr, t0, t1), ga.d_k = p.view(g.dk, t0, t1), ga.d_v = p.view(g.dv, t0, t1);
  ga.w = p.w.data(), ga.u = p.u.data(), ga.d_w = g.dw.data(), ga.d_u = g.du.data();
  ga.wkv = wkv.data(), ga.log_denominators = log_den.data(), ga.chunk = chunk;
  if (start) {
    ga.start_state = start->data(), ga.d_start_state = d_start->data(), ga.state_stride = stride;
    ga.leave_slice = std::move(leave);
  }
  decay_attention_backward(Form::Chunkwise, ga, arena);
}

TEST(DecaySlices, PiecesFromCombinedRecordsEqualTheWholeForwardAndBackward) {
  SliceProblem p(2, 45, 40, 13, 2.0);
  for (int64_t c = 0; c < p.C; c += 7) p.w[c] *= 10.f;
  auto d_out = random_vector(p.k.size(), 14);
  std::vector<float> whole_out(p.k.size(), NAN), out(p.k.size(), NAN);
  PieceGrads whole(p), pieces(p);
  run_piece(p, d_out, 0, p.T, nullptr, nullptr, nullptr, whole_out, whole);
  // Pieces [0, 13), [13, 30), [30, 45): chunk 8 cuts none of them evenly.
  const int64_t cut1 = 13, cut2 = 30, stride = kRecordRows * p.C;
  std::vector<float> empty(p.B * stride);
  decay_attention_empty_records(empty.data(), p.B, p.C, stride);
  const auto r1 = p.record(0, cut1), r2 = p.record(cut1, cut2);
  const auto start2 = p.combined(empty, r1), start3 = p.combined(start2, r2);
  auto with_log_decay = [&](std::vector<float> g, int64_t length) {
    for (int64_t s = 0; s < p.B; ++s)
      for (int64_t c = 0; c < p.C; ++c)
        g[s * stride + 3 * p.C + c] = -static_cast<float>(length) * p.w[c];
    return g;
  };
  // Last piece first: its start state's gradient; then each earlier piece receives the fold of
  // the later pieces' gradients (the last first) and sends its own.
  std::vector<float> g3(p.B * stride), g2(g3.size()), g1(g3.size()), g2_own;
  run_piece(p, d_out, cut2, p.T, &start3, &g3, nullptr, out, pieces);
  const auto g3_record = with_log_decay(g3, p.T - cut2);
  // The kernel holds the buffers: the callbacks overwrite them in place.
  run_piece(p, d_out, cut1, cut2, &start2, &g2, [&] {
    g2_own = with_log_decay(g2, cut2 - cut1);
    const auto later = p.combined(empty, g3_record);
    std::copy(later.begin(), later.end(), g2.begin());
  }, out, pieces);
  run_piece(p, d_out, 0, cut1, &empty, &g1, [&] {
    const auto later = p.combined(p.combined(empty, g3_record), g2_own);
    std::copy(later.begin(), later.end(), g1.begin());
  }, out, pieces);
  EXPECT_TRUE(close(out, whole_out, 1e-5));
  EXPECT_TRUE(close(pieces.dr, whole.dr, 1e-5));
  EXPECT_TRUE(close(pieces.dk, whole.dk, 1e-5));
  EXPECT_TRUE(close(pieces.dv, whole.dv, 1e-5));
  EXPECT_TRUE(close(pieces.dw, whole.dw, 1e-5));
  EXPECT_TRUE(close(pieces.du, whole.du, 1e-5));
}

TEST(DecaySlices, AStartStateNeedsTheChunkwiseForm) {
  SliceProblem p(1, 4, 3, 1, 1.0);
  std::vector<float> state(3 * p.C, 0.f), d_state(state.size()), wkv(p.k.size()), ld(p.k.size());
  std::vector<float> d(p.k.size(), 0.f), dw(p.C, 0.f), du(p.C, 0.f);
  DecayAttentionGradArgs ga;
  ga.r = p.view(p.r, 0, p.T), ga.k = p.view(p.k, 0, p.T), ga.v = p.view(p.v, 0, p.T);
  ga.d_out = ga.d_r = ga.d_k = ga.d_v = p.view(d, 0, p.T);
  ga.w = p.w.data(), ga.u = p.u.data(), ga.d_w = dw.data(), ga.d_u = du.data();
  ga.wkv = wkv.data(), ga.log_denominators = ld.data();
  ga.start_state = state.data(), ga.d_start_state = d_state.data(), ga.state_stride = 3 * p.C;
  Arena arena(decay_attention_backward_workspace_floats(Form::Parallel, 1, p.T, p.C, 64));
  EXPECT_TRUE(throws_error_naming([&] { decay_attention_backward(Form::Parallel, ga, arena); },
                                  {"start state", "chunkwise"}));
  ga.d_start_state = nullptr;
  EXPECT_TRUE(throws_error_naming([&] { decay_attention_backward(Form::Chunkwise, ga, arena); },
                                  {"d_start_state"}));
}

}  // namespace
