#pragma once
// Per-level entry points of feature_map_rows.cpp (compiled once per instruction-set level,
// retnet/core/isa_kernels.h): the exponential rows of the feature maps (feature_maps.cpp calls
// the variant of kernel_isa()).
#include <cstdint>

#include "retnet/core/isa_kernels.h"

namespace retnet {

// phi[i] = elu(x[i]) + 1 for i < D.
RETNET_ISA_DECLARE(void elu_plus_one_row(const float* x, float* phi, int64_t D))
// d_x[i] += d_phi[i] * (elu + 1)'(x[i]), from phi = elu(x) + 1.
RETNET_ISA_DECLARE(void elu_plus_one_row_backward(const float* x, const float* phi,
                                                  const float* d_phi, float* d_x, int64_t D))
// p[j] = exp(p[j] - shift) * scale for j < m (arguments up to 88).
RETNET_ISA_DECLARE(void scaled_exp_row(float* p, int64_t m, float shift, float scale))

}  // namespace retnet
