#pragma once
// Internal (src/include): the CPU backend's projection and embedding (src/backend/cpu/), which
// training's layer loop also calls directly.
#include <cstddef>
#include <cstdint>

#include "retnet/model/model.h"

namespace retnet::detail {

// y[M, N] = x[M, K] W^T (+ y when accumulate) for weight tensor `w` [N, K] (rows of adjacent
// tensors may follow: q, k, v, g are one product), by model.weight(w) through matmul.
void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
             int64_t ldx, bool accumulate, float* y, int64_t ldy);

// x[N, d] = embed_scale * the embedding rows of tokens[N], from wherever the model keeps them
// (float32, row-major f16/bf16, the tied LM head's panels, or rows used in place).
void embed_tokens(const Model& model, const int32_t* tokens, int64_t N, float* x);

}  // namespace retnet::detail
