// Sequence parallel decay attention: a slice's record (the state its tokens leave from an empty one
// and its log decay) and the associative rule that joins records of consecutive slices; see
// src/include/retnet/mixers/decay_attention.h.
#include <algorithm>
#include <cmath>

#include "decay_kernels.h"
#include "decay_lanes.h"
#include "retnet/core/error.h"
#include "retnet/mixers/decay_attention.h"

namespace retnet {
namespace {

using detail::kCb;
using detail::kEmptyExponent;

// Tokens packed per step of the summary: the chunkwise form's state update over short chunks,
// with its packed rows on the stack.
constexpr int64_t kSummaryChunk = 16;

// One (sequence, channel block): the state after the sequence's tokens, from an empty one.
void summary_block(const TensorView& k, const TensorView& v, const float* w_all, int64_t b,
                   int64_t c0, int64_t nc, int64_t T, int64_t C, float* record) {
  alignas(64) float w[kCb], a[kCb] = {}, bs[kCb] = {}, p[kCb] = {}, pe[kCb], R[kCb];
  alignas(64) float K[kSummaryChunk * kCb], V[kSummaryChunk * kCb];
  static const auto fold_chunk = RETNET_ISA_VARIANT(kernel_isa(), decay_fold_chunk);
  detail::pack_channels(w_all, c0, nc, w);
  for (int64_t t0 = 0; t0 < T; t0 += kSummaryChunk) {
    const int64_t L = std::min(kSummaryChunk, T - t0);
    detail::pack_rows(k, b, t0, L, c0, nc, K);
    detail::pack_rows(v, b, t0, L, c0, nc, V);
#pragma omp simd
    for (int64_t c = 0; c < kCb; ++c) R[c] = pe[c] = bs[c] > 0.f ? p[c] : kEmptyExponent;
    for (int64_t i = 0; i < L; ++i)
#pragma omp simd
      for (int64_t c = 0; c < kCb; ++c) R[c] = std::max(R[c] - w[c], K[i * kCb + c]);
    fold_chunk(K, V, L, w, pe, R, a, bs, p);
  }
  const float length = static_cast<float>(T);
  for (int64_t c = 0; c < nc; ++c) {
    record[c0 + c] = a[c];
    record[C + c0 + c] = bs[c];
    record[2 * C + c0 + c] = bs[c] > 0.f ? p[c] : kEmptyExponent;
    record[3 * C + c0 + c] = -length * w[c];
  }
}

}  // namespace

void decay_attention_slice_record(const TensorView& k, const TensorView& v, const float* w,
                                  float* records, int64_t stride) {
  const detail::ChannelDims d = detail::channel_dims(k, "decay attention slice record");
  detail::check_channel_views(d, {{&k, "k"}, {&v, "v"}});
  RETNET_CHECK(w != nullptr && records != nullptr,
               "decay attention slice record needs the decay w and a record buffer");
  RETNET_CHECK(d.B <= 1 || stride >= kDecaySliceRecordRows * d.C,
               "decay attention slice record: stride {} is below a record's {} floats", stride,
               kDecaySliceRecordRows * d.C);
  Arena unused;  // per_task 0: the loop takes nothing from it
  detail::for_each_channel_block(d.B, d.C, unused, 0,
                                 [&](int64_t b, int64_t c0, int64_t nc, float*) {
                                   summary_block(k, v, w, b, c0, nc, d.T, d.C,
                                                 records + b * stride);
                                 });
}

void decay_attention_empty_records(float* records, int64_t sequences, int64_t C, int64_t stride) {
  for (int64_t s = 0; s < sequences; ++s) {
    float* r = records + s * stride;
    std::fill(r, r + 2 * C, 0.f);
    std::fill(r + 2 * C, r + 3 * C, kEmptyExponent);
    std::fill(r + 3 * C, r + 4 * C, 0.f);
  }
}

void decay_attention_combine_records(float* acc, const float* x, int64_t sequences, int64_t C,
                                     int64_t stride) {
  for (int64_t s = 0; s < sequences; ++s) {
    float* A = acc + s * stride;
    const float* X = x + s * stride;
    for (int64_t c = 0; c < C; ++c) {
      // acc's sums decayed over x's slice, against x's own; the larger exponent scales both.
      const float shifted = A[2 * C + c] + X[3 * C + c];
      const float top = std::max(shifted, X[2 * C + c]);
      const float fa = std::exp(shifted - top), fx = std::exp(X[2 * C + c] - top);
      A[c] = fa * A[c] + fx * X[c];
      A[C + c] = fa * A[C + c] + fx * X[C + c];
      A[2 * C + c] = top;
      A[3 * C + c] += X[3 * C + c];
    }
  }
}

}  // namespace retnet
