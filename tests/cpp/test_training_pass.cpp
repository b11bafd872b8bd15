// The training pass: parallel and chunkwise gradients agree; the loss matches the logits; the
// gradient matches a finite difference of the loss in the direction of the gradient.
#include <cmath>

#include "retnet/model/forward.h"
#include "retnet/model/training.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;

namespace {

Model tiny_model(double eps) {
  Config c = test::tiny_config();
  c.layernorm_eps = eps;
  return Model::init(c, 9);
}

}  // namespace

TEST(TrainingPass, ParallelAndChunkwiseGradientsAgree) {
  for (double eps : {0.0, 1e-6}) {
    Model m = tiny_model(eps);
    const int64_t B = 3, T = 37;
    std::vector<int32_t> tok(B * T), tgt(B * T);
    for (int64_t i = 0; i < B * T; ++i) tok[i] = (i * 7 + 3) % 30, tgt[i] = (i * 11 + 1) % 30;
    Arena arena;
    ParamBuffer gp(m.params().layout()), gc(m.params().layout());
    TrainingOptions par, chunk;
    chunk.form = Form::Chunkwise;
    chunk.chunk = 8;
    double lp = loss_and_gradients(m, tok.data(), tgt.data(), B, T, par, arena, &gp);
    double lc = loss_and_gradients(m, tok.data(), tgt.data(), B, T, chunk, arena, &gc);
    EXPECT_NEAR(lp, lc, 1e-5 * lp);
    std::vector<float> a(gp.data(), gp.data() + gp.size()), b(gc.data(), gc.data() + gc.size());
    EXPECT_TRUE(close(b, a, 1e-5));
    // The loss alone equals the one computed with gradients, and the logits' cross-entropy.
    EXPECT_DOUBLE_EQ(loss_and_gradients(m, tok.data(), tgt.data(), B, T, par, arena, nullptr), lp);
    std::vector<float> logits(B * T * 30);
    forward_logits(m, tok.data(), B, T, logits.data(), ForwardOptions{}, arena);
    double ce = 0;
    for (int64_t n = 0; n < B * T; ++n) {
      double mx = -1e30, s = 0;
      for (int j = 0; j < 30; ++j) mx = std::max(mx, double(logits[n * 30 + j]));
      for (int j = 0; j < 30; ++j) s += std::exp(logits[n * 30 + j] - mx);
      ce += mx + std::log(s) - logits[n * 30 + tgt[n]];
    }
    EXPECT_NEAR(ce / (B * T), lp, 1e-5 * lp);
  }
}

TEST(TrainingPass, GradientPredictsTheLossChange) {
  // Directional derivative along the gradient: (L(p + h g) - L(p - h g)) / 2h = |g|^2.
  Model m = tiny_model(1e-6);
  const int64_t B = 2, T = 20;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) tok[i] = (i * 5 + 1) % 30, tgt[i] = (i * 13 + 2) % 30;
  Arena arena;
  ParamBuffer g(m.params().layout());
  loss_and_gradients(m, tok.data(), tgt.data(), B, T, TrainingOptions{}, arena, &g);
  double norm2 = 0;
  for (size_t i = 0; i < g.size(); ++i) norm2 += double(g.data()[i]) * g.data()[i];
  const double h = 1e-3 / std::sqrt(norm2);  // a step of 1e-3 in parameter space
  std::vector<float> p0(m.params().data(), m.params().data() + m.params().size());
  auto loss_at = [&](double t) {
    for (size_t i = 0; i < p0.size(); ++i) m.params().data()[i] = p0[i] + float(t * g.data()[i]);
    return loss_and_gradients(m, tok.data(), tgt.data(), B, T, TrainingOptions{}, arena, nullptr);
  };
  double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
  EXPECT_NEAR(fd, norm2, 5e-4 * norm2);  // float32 loss: ~1e-4 of noise at this step
}

TEST(TrainingPass, RejectsBadInput) {
  Model m = tiny_model(0.0);
  std::vector<int32_t> tok = {1, 2, 3}, tgt = {2, 3, 30};
  Arena arena;
  EXPECT_THROW(loss_and_gradients(m, tok.data(), tgt.data(), 1, 3, TrainingOptions{}, arena, nullptr), Error);
  TrainingOptions scan;
  scan.form = Form::Scan;
  tgt[2] = 4;
  EXPECT_THROW(loss_and_gradients(m, tok.data(), tgt.data(), 1, 3, scan, arena, nullptr), Error);
}
