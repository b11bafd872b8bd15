#pragma once
// TensorView: a non-owning strided view (pointer + shape + strides, up to 4 dims) over float memory.
// Kernels take raw pointers with shapes in comments; views are for the code that slices and passes
// blocks around (heads of a projection, one sequence of a batch, a chunk of time steps).
#include <array>
#include <cstdint>
#include <initializer_list>

#include "retnet/core/error.h"

namespace retnet {

struct TensorView {
  float* data = nullptr;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  std::array<int64_t, 4> stride{0, 0, 0, 0};

  // A row-major contiguous view of `dims`.
  static TensorView contiguous(float* data, std::initializer_list<int64_t> dims) {
    TensorView v;
    v.data = data;
    v.ndim = static_cast<int>(dims.size());
    RETNET_CHECK(v.ndim >= 1 && v.ndim <= 4, "TensorView supports 1 to 4 dims, got {}", v.ndim);
    int i = 0;
    for (int64_t d : dims) v.shape[i++] = d;
    int64_t s = 1;
    for (int k = v.ndim - 1; k >= 0; --k) {
      v.stride[k] = s;
      s *= v.shape[k];
    }
    return v;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int k = 0; k < ndim; ++k) n *= shape[k];
    return n;
  }
  bool is_contiguous() const {
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; --k) {
      if (shape[k] != 1 && stride[k] != s) return false;
      s *= shape[k];
    }
    return true;
  }
  float& at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return data[i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]];
  }
  // Elements [begin, end) along `dim`; shares memory.
  TensorView slice(int dim, int64_t begin, int64_t end) const {
    RETNET_CHECK(dim >= 0 && dim < ndim && begin >= 0 && begin <= end && end <= shape[dim],
                 "slice [{}, {}) of dim {} (size {}) is out of range", begin, end, dim,
                 dim < ndim ? shape[dim] : -1);
    TensorView v = *this;
    v.data = data + begin * stride[dim];
    v.shape[dim] = end - begin;
    return v;
  }
  // Splits dim into (dim / parts, parts)... as (outer, inner) = (shape/inner, inner).
  TensorView split(int dim, int64_t inner) const {
    RETNET_CHECK(ndim < 4 && inner > 0 && shape[dim] % inner == 0,
                 "cannot split dim {} of size {} into blocks of {}", dim, shape[dim], inner);
    TensorView v;
    v.data = data;
    v.ndim = ndim + 1;
    for (int k = 0, o = 0; k < ndim; ++k, ++o) {
      if (k == dim) {
        v.shape[o] = shape[k] / inner;
        v.stride[o] = stride[k] * inner;
        ++o;
        v.shape[o] = inner;
        v.stride[o] = stride[k];
      } else {
        v.shape[o] = shape[k];
        v.stride[o] = stride[k];
      }
    }
    return v;
  }
  TensorView transpose(int a, int b) const {
    TensorView v = *this;
    std::swap(v.shape[a], v.shape[b]);
    std::swap(v.stride[a], v.stride[b]);
    return v;
  }
};

}  // namespace retnet
