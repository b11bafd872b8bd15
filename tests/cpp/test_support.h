#pragma once
// Model-level test helpers (test_helpers.h has the ones that need no model).
#include <cmath>
#include <cstdint>
#include <vector>

#include "retnet/model/forward.h"

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

}  // namespace retnet::test
