#pragma once
// The cross-entropy loss fused with the LM head: logits = xn W^T are computed block by block of
// kCrossEntropyBlock rows and never stored whole, and with gradients requested the backward runs
// in the same pass: d xn = dlogits W, dW += dlogits^T xn, where dlogits = (softmax - onehot) / N.
#include <cstdint>
#include <functional>

namespace retnet {

inline constexpr int64_t kCrossEntropyBlock = 256;

// Mean cross-entropy (nats per row) of targets [N] given features xn [N, D] and the head W [V, D].
// `logits` is scratch of kCrossEntropyBlock x V floats. With dxn non-null, writes d loss / d xn
// [N, D] and accumulates (+=) d loss / d W into dW [V, D]. A non-finite logit is an Error naming
// its position (rows are sequences of T tokens). `grad_count` is the count the gradient's mean
// divides by (0: N): a slice of sequences split across processes weighs its tokens by the count of
// all slices, so the slices' gradients add up to the whole sequences' (the loss returned stays
// the mean over these N rows).
double cross_entropy_with_head(const float* xn, const float* W, const int32_t* targets, int64_t N,
                               int64_t T, int64_t D, int64_t V, float* logits, float* dxn,
                               float* dW, int64_t grad_count = 0);

// The loss alone, with the head's product given: head(xn rows [R, D], R, logits [R, V]). For a
// head held only in an inference copy (f16/bf16 panels, quantised blocks).
using HeadProduct = std::function<void(const float* xn, int64_t R, float* logits)>;
double cross_entropy_with_head(const float* xn, const HeadProduct& head, const int32_t* targets,
                               int64_t N, int64_t T, int64_t D, int64_t V, float* logits);

}  // namespace retnet
