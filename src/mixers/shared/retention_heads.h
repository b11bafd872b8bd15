#pragma once
// Internal to the retention and attention blocks: keys and values shared by groups of query heads (kv_heads) and
// the feature map of queries and keys (feature_map), forward and backward.
#include <cstdint>

#include "retnet/model/config.h"

namespace retnet::detail {

// dst[n, (j * groups + g) * dh + i] = src[n * lds + j * dh + i] for N rows of Hkv heads of dh:
// every kv head repeated for its group of query heads (fla's repeat '... h d -> ... (h g) d').
// dst is [N, Hkv * groups * dh], contiguous.
void expand_kv_heads(const float* src, int64_t lds, float* dst, int64_t N, int64_t Hkv,
                     int64_t groups, int64_t dh);

// The backward of expand_kv_heads: dst[n * ldd + j * dh + i] = sum_g src[n, (j * groups + g) * dh
// + i] (overwritten).
void reduce_kv_heads(const float* src, float* dst, int64_t ldd, int64_t N, int64_t Hkv,
                     int64_t groups, int64_t dh);

// x = f(x) in place over N rows of C (`ld` floats apart).
void apply_qk_feature_map(QkFeatureMap f, float* x, int64_t ld, int64_t N, int64_t C);

// dx *= f'(pre) in place: pre [N, C] contiguous (the values before the map), dx rows `ldd` apart.
void qk_feature_map_backward(QkFeatureMap f, const float* pre, float* dx, int64_t ldd, int64_t N,
                          int64_t C);

}  // namespace retnet::detail
