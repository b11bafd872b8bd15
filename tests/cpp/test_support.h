#pragma once
// Model-level test helpers (test_helpers.h has the ones that need no model).
#include <cmath>
#include <cstdint>
#include <vector>

#include "retnet/model/forward.h"
#include "retnet/model/training.h"
#include "test_helpers.h"

namespace retnet::test {

// Logits [B, T, vocab] of tokens [B, T] (T = tok.size() / B) in one form. The output starts as
// NaN, so an element the engine does not write fails every comparison.
inline std::vector<float> model_logits(const Model& m, const std::vector<int32_t>& tok, int64_t B,
                                       Form form, int64_t chunk = 0) {
  const int64_t T = static_cast<int64_t>(tok.size()) / B;
  std::vector<float> out(tok.size() * m.config().vocab_size, NAN);
  ForwardOptions o;
  o.form = form;
  o.chunk = chunk;
  Arena arena;
  forward_logits(m, tok.data(), B, T, out.data(), o, arena);
  return out;
}

// Logits [T, vocab] of one sequence in the default form.
inline std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens) {
  return model_logits(m, tokens, 1, ForwardOptions{}.form);
}

// Checks that the chunkwise form (chunk C) gives the parallel form's loss and
// gradients on tokens and targets [B, T]; the parallel form's gradients are left in `gp`.
inline void expect_chunkwise_gradients_match(const Model& m, const std::vector<int32_t>& tok,
                                             const std::vector<int32_t>& tgt, int64_t B,
                                             int64_t T, int64_t C, ParamBuffer& gp) {
  Arena arena;
  ParamBuffer gc(m.params().layout());
  TrainingOptions chunk;
  chunk.form = Form::Chunkwise;
  chunk.chunk = C;
  const double lp = loss_and_gradients(m, tok.data(), tgt.data(), B, T, {}, arena, &gp);
  const double lc = loss_and_gradients(m, tok.data(), tgt.data(), B, T, chunk, arena, &gc);
  EXPECT_NEAR(lp, lc, 1e-5 * lp);
  EXPECT_TRUE(close(std::vector<float>(gc.data(), gc.data() + gc.size()),
                    std::vector<float>(gp.data(), gp.data() + gp.size()), 1e-5));
}

}  // namespace retnet::test
