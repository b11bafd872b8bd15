// Grouped keys and values and the feature map of the retention and attention blocks
// (retention_heads.h).
#include "retention_heads.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "retnet/core/parallel.h"
#include "retnet/ops/activation.h"

namespace retnet::detail {
namespace {

float feature(QkFeatureMap f, float x) {
  switch (f) {
    case QkFeatureMap::None:
      return x;
    case QkFeatureMap::Relu:
      return x > 0.f ? x : 0.f;
    case QkFeatureMap::Relu2:
      return x > 0.f ? x * x : 0.f;
    case QkFeatureMap::Sigmoid:
      return 1.f / (1.f + std::exp(-x));
    case QkFeatureMap::Tanh:
      return std::tanh(x);
    case QkFeatureMap::Gelu:
      return gelu(x);
    case QkFeatureMap::Swish:
      return swish(x);
  }
  return x;
}

float feature_grad(QkFeatureMap f, float x) {
  switch (f) {
    case QkFeatureMap::None:
      return 1.f;
    case QkFeatureMap::Relu:
      return x > 0.f ? 1.f : 0.f;
    case QkFeatureMap::Relu2:
      return x > 0.f ? 2.f * x : 0.f;
    case QkFeatureMap::Sigmoid: {
      const float s = 1.f / (1.f + std::exp(-x));
      return s * (1.f - s);
    }
    case QkFeatureMap::Tanh: {
      const float t = std::tanh(x);
      return 1.f - t * t;
    }
    case QkFeatureMap::Gelu:
      return gelu_grad(x);
    case QkFeatureMap::Swish:
      return swish_grad(x);
  }
  return 1.f;
}

}  // namespace

void expand_kv_heads(const float* src, int64_t lds, float* dst, int64_t N, int64_t Hkv,
                     int64_t groups, int64_t dh) {
  const int64_t ldd = Hkv * groups * dh;
  parallel_for_if(N * ldd > 65536, N, [&](int64_t n) {
    for (int64_t j = 0; j < Hkv; ++j)
      for (int64_t g = 0; g < groups; ++g)
        std::memcpy(dst + n * ldd + (j * groups + g) * dh, src + n * lds + j * dh,
                    static_cast<size_t>(dh) * sizeof(float));
  });
}

void reduce_kv_heads(const float* src, float* dst, int64_t ldd, int64_t N, int64_t Hkv,
                     int64_t groups, int64_t dh) {
  const int64_t lds = Hkv * groups * dh;
  parallel_for_if(N * lds > 65536, N, [&](int64_t n) {
    for (int64_t j = 0; j < Hkv; ++j) {
      float* out = dst + n * ldd + j * dh;
      const float* in = src + n * lds + j * groups * dh;
      std::memcpy(out, in, static_cast<size_t>(dh) * sizeof(float));
      for (int64_t g = 1; g < groups; ++g)
        for (int64_t i = 0; i < dh; ++i) out[i] += in[g * dh + i];
    }
  });
}

void apply_qk_feature_map(QkFeatureMap f, float* x, int64_t ld, int64_t N, int64_t C) {
  if (f == QkFeatureMap::None) return;
  parallel_for_if(N * C > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < C; ++i) x[n * ld + i] = feature(f, x[n * ld + i]);
  });
}

void qk_feature_map_backward(QkFeatureMap f, const float* pre, float* dx, int64_t ldd, int64_t N,
                          int64_t C) {
  if (f == QkFeatureMap::None) return;
  parallel_for_if(N * C > 65536, N, [&](int64_t n) {
    for (int64_t i = 0; i < C; ++i) dx[n * ldd + i] *= feature_grad(f, pre[n * C + i]);
  });
}

}  // namespace retnet::detail
