#pragma once
// Feature maps of the kernelised-attention mixers: phi such that sim(q, k) = phi(q) . phi(k).
//
//   elu+1  (linear transformer, Katharopoulos et al. 2020): phi(x) = elu(x) + 1, F = Dk features,
//          positive everywhere.
//   FAVOR+ (Performer, Choromanski et al. 2021): m positive orthogonal random features,
//          phi(x)_j = exp(w_j . x' - |x'|^2 / 2 - shift) / sqrt(m),  x' = x / Dk^(1/4),
//          so that E[phi(q) . phi(k)] = exp(q . k / sqrt(Dk)) exp(-shift_q - shift_k): the softmax
//          kernel up to factors that the attention's normalisation cancels (see the shifts below).
//
// Stabilisers (the shifts). exp() must stay finite, and the normalised output
//   o_n = sum_m (phi(q_n) . phi(k_m)) v_m / sum_m phi(q_n) . phi(k_m)
// is unchanged by any positive factor on phi(q_n) (one query at a time) and by one factor common
// to all keys of a sequence and head. A factor per key would change it. Hence:
//   queries: shift = max_j (w_j . x') - |x'|^2 / 2 per row, so the largest feature is 1 / sqrt(m):
//            finite and never all zero, for any input.
//   keys:    one constant per matrix, key_shift = max(0, max_j |w_j|^2 / 2 - kFavorKeyHeadroom).
//            Since w . x' - |x'|^2 / 2 = |w|^2 / 2 - |x' - w|^2 / 2 <= |w|^2 / 2 for every x', a key
//            feature never exceeds exp(kFavorKeyHeadroom) / sqrt(m), whatever the input, so states
//            and scores stay finite. It depends on the matrix only, not on the data: every form,
//            every call and every decoding step uses the same one, and states can be continued.
//            Price: very large keys (or Dk above ~150 with unit-scale inputs) can underflow to 0
//            features; the attention then outputs 0 for a query that sees no nonzero key.
// Backward passes treat the shifts as constants: exact for the composed attention, whose output
// does not depend on them.
//
// Shapes: x, phi: [B, T, H, D] views with unit stride in the last dim, any other strides
// (D = Dk for x, D = F for phi). One random matrix w [m, Dk] (row-major) serves all heads.
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/tensor.h"

namespace retnet {

enum class FeatureMapKind { EluPlusOne, Favor };
const char* feature_map_name(FeatureMapKind kind);
FeatureMapKind parse_feature_map(const std::string& name);  // "elu" | "favor"; throws Error

// Largest key feature allowed, as a power of e: exp(60) ~ 1e26 leaves 1e12 of room below float's
// maximum for sums over tokens and values.
inline constexpr double kFavorKeyHeadroom = 60.0;

// A feature map and, for FAVOR+, its random matrix (not owned).
struct FeatureMap {
  FeatureMapKind kind = FeatureMapKind::EluPlusOne;
  const float* favor_w = nullptr;  // [m, Dk]
  int64_t favor_m = 0;             // m, the number of random features
  float favor_key_shift = 0.f;     // favor_key_shift(favor_w, m, Dk)

  int64_t features(int64_t Dk) const { return kind == FeatureMapKind::Favor ? favor_m : Dk; }
};

// FAVOR+'s random matrix w [m, Dk]: ceil(m / Dk) blocks of Dk rows, each block the rows of a
// uniformly random orthogonal matrix (Gram-Schmidt of a Gaussian one), the last block cut to what
// is left; each row then scaled to the norm of an independent Gaussian vector of Dk entries
// (chi-distributed with Dk degrees of freedom), so that every row is marginally N(0, I).
// Drawn from Philox(seed): a pure function of (seed, m, Dk).
std::vector<float> favor_random_matrix(uint64_t seed, int64_t m, int64_t Dk);

// max(0, max_j |w_j|^2 / 2 - kFavorKeyHeadroom) for w [m, Dk].
float favor_key_shift(const float* w, int64_t m, int64_t Dk);

// FeatureMap for elu+1, or for FAVOR+ over `w` [m, Dk] (computes the key shift).
FeatureMap elu_feature_map();
FeatureMap favor_feature_map(const float* w, int64_t m, int64_t Dk);

enum class FeatureRole { Query, Key };

// phi = feature map of x: x [B, T, H, Dk] -> phi [B, T, H, F]. `role` picks FAVOR+'s shift (see
// above); elu+1 ignores it.
void feature_map_forward(const FeatureMap& map, FeatureRole role, const TensorView& x,
                         const TensorView& phi);

// d_x += (d phi / d x)^T d_phi, with the shifts held constant. Reads x and the forward's phi.
//   elu+1:  d_x += d_phi * (x > 0 ? 1 : phi)
//   FAVOR+: d_x += Dk^(-1/4) (sum_j c_j w_j - (sum_j c_j) x'),  c_j = d_phi_j phi_j
// FAVOR+ takes T * m floats per head from the arena (feature_map_backward_workspace_floats).
void feature_map_backward(const FeatureMap& map, const TensorView& x, const TensorView& phi,
                          const TensorView& d_phi, const TensorView& d_x, Arena& arena);
size_t feature_map_backward_workspace_floats(const FeatureMap& map, int64_t B, int64_t T,
                                             int64_t H);

// One row in double precision, for references in tests: x [Dk] -> phi [F].
void feature_map_reference(const FeatureMap& map, FeatureRole role, const double* x, int64_t Dk,
                           double* phi);

}  // namespace retnet
