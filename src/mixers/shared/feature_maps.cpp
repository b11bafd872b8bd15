// Feature maps of the kernelised-attention mixers; definitions in
// src/include/retnet/mixers/feature_maps.h.
#include "retnet/mixers/feature_maps.h"

#include <algorithm>
#include <cmath>

#include "feature_map_rows.h"
#include "head_loop.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/parallel.h"
#include "retnet/core/rng.h"

namespace retnet {
namespace {

struct Dims {
  int64_t B, T, H, D;
};

Dims check_view(const TensorView& t, const char* name) {
  RETNET_CHECK(t.ndim == 4 && t.stride[3] == 1,
               "feature map: {} must be a [B, T, H, D] view with unit stride in the last dim "
               "(got {} dims, last stride {})",
               name, t.ndim, t.stride[3]);
  return {t.shape[0], t.shape[1], t.shape[2], t.shape[3]};
}

void check_same(const Dims& a, const Dims& b, const char* what) {
  RETNET_CHECK(a.B == b.B && a.T == b.T && a.H == b.H && a.D == b.D,
               "feature map: {} has shape [{}, {}, {}, {}], expected [{}, {}, {}, {}]", what, b.B,
               b.T, b.H, b.D, a.B, a.T, a.H, a.D);
}

// Checks x [B, T, H, Dk] against phi [B, T, H, F] for `map`; returns x's dims.
Dims check_pair(const FeatureMap& map, const TensorView& x, const TensorView& phi,
                const char* phi_name) {
  Dims dx = check_view(x, "x");
  Dims dp = check_view(phi, phi_name);
  check_same(Dims{dx.B, dx.T, dx.H, map.features(dx.D)}, dp, phi_name);
  if (map.kind == FeatureMapKind::Favor)
    RETNET_CHECK(map.favor_w != nullptr && map.favor_m >= 1,
                 "FAVOR+ feature map needs its random matrix (w = {}, m = {})",
                 static_cast<const void*>(map.favor_w), map.favor_m);
  return dx;
}

// Runs fn(b, t, h) for all B * T * H rows, across threads when there is enough work.
template <typename Fn>
void for_each_row(const Dims& d, Fn fn) {
  parallel_for_if(d.B * d.T * d.H * d.D >= 16384, d.B * d.T * d.H,
                  [&](int64_t r) { fn(r / (d.T * d.H), (r / d.H) % d.T, r % d.H); });
}

// ---- FAVOR+ --------------------------------------------------------------------------------
// One head's T rows: phi [T, m] = exp(x' W^T - shift) / sqrt(m), x' = x / Dk^(1/4).
void favor_head(const FeatureMap& map, FeatureRole role, const float* x, int64_t ldx, float* phi,
                int64_t ldp, int64_t T, int64_t Dk) {
  const int64_t m = map.favor_m;
  const double inv_root4 = std::pow(static_cast<double>(Dk), -0.25);
  const float inv_sqrt_m = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m)));
  sgemm(Trans::No, Trans::Yes, T, m, Dk, static_cast<float>(inv_root4), x, ldx, map.favor_w, Dk,
        0.f, phi, ldp);
  static const auto exp_row = RETNET_ISA_VARIANT(kernel_isa(), scaled_exp_row);
  for (int64_t t = 0; t < T; ++t) {
    float* p = phi + t * ldp;
    float shift;
    if (role == FeatureRole::Query) {
      // |x'|^2 / 2 cancels against the shift: only w . x' minus its row max remains.
      shift = *std::max_element(p, p + m);
    } else {
      const float* xr = x + t * ldx;
      double sq = 0;
      for (int64_t i = 0; i < Dk; ++i) sq += static_cast<double>(xr[i]) * xr[i];
      shift = static_cast<float>(0.5 * sq * inv_root4 * inv_root4) + map.favor_key_shift;
    }
    exp_row(p, m, shift, inv_sqrt_m);
  }
}

// d_x [T, Dk] += Dk^(-1/4) (C W - rowsum(C) x'), C = d_phi .* phi; c: [T, m] scratch.
void favor_head_backward(const FeatureMap& map, const float* x, int64_t ldx, const float* phi,
                         int64_t ldp, const float* d_phi, int64_t ldd, float* d_x, int64_t lddx,
                         int64_t T, int64_t Dk, float* c) {
  const int64_t m = map.favor_m;
  const double inv_root4 = std::pow(static_cast<double>(Dk), -0.25);
  for (int64_t t = 0; t < T; ++t) {
    const float* p = phi + t * ldp;
    const float* g = d_phi + t * ldd;
    float* cr = c + t * m;
    float s = 0.f;
    for (int64_t j = 0; j < m; ++j) {
      cr[j] = g[j] * p[j];
      s += cr[j];
    }
    // The |x'|^2 / 2 term: d/dx of -|x / Dk^(1/4)|^2 / 2 is -x / sqrt(Dk).
    const float a = static_cast<float>(s * inv_root4 * inv_root4);
    const float* xr = x + t * ldx;
    float* dxr = d_x + t * lddx;
    for (int64_t i = 0; i < Dk; ++i) dxr[i] -= a * xr[i];
  }
  sgemm(Trans::No, Trans::No, T, Dk, m, static_cast<float>(inv_root4), c, m, map.favor_w, Dk, 1.f,
        d_x, lddx);
}

// Orthonormalises the rows of g [n, n] in place (modified Gram-Schmidt, twice for accuracy).
void orthonormalise_rows(std::vector<double>& g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double* gi = g.data() + i * n;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t j = 0; j < i; ++j) {
        const double* gj = g.data() + j * n;
        double dot = 0;
        for (int64_t l = 0; l < n; ++l) dot += gi[l] * gj[l];
        for (int64_t l = 0; l < n; ++l) gi[l] -= dot * gj[l];
      }
    double norm = 0;
    for (int64_t l = 0; l < n; ++l) norm += gi[l] * gi[l];
    norm = std::sqrt(norm);
    RETNET_CHECK(norm > 1e-12, "FAVOR+: degenerate Gaussian block (row {} has norm {})", i, norm);
    for (int64_t l = 0; l < n; ++l) gi[l] /= norm;
  }
}

}  // namespace

const char* feature_map_name(FeatureMapKind kind) {
  return kind == FeatureMapKind::Favor ? "favor" : "elu";
}

FeatureMapKind parse_feature_map(const std::string& name) {
  if (name == "elu") return FeatureMapKind::EluPlusOne;
  if (name == "favor") return FeatureMapKind::Favor;
  throw Error(fmt::format("unknown feature map '{}'; expected elu or favor", name));
}

std::vector<float> favor_random_matrix(uint64_t seed, int64_t m, int64_t Dk) {
  RETNET_CHECK(m >= 1 && Dk >= 1, "FAVOR+: need at least one feature and one dim, got m = {}, "
               "Dk = {}", m, Dk);
  Philox rng(seed);
  std::vector<float> w(m * Dk);
  std::vector<double> g(Dk * Dk);
  // Streams: 2 * block for the Gaussian block, 2 * block + 1 for the row norms.
  for (int64_t block = 0; block * Dk < m; ++block) {
    const uint64_t stream = 2 * static_cast<uint64_t>(block);
    for (int64_t i = 0; i < Dk * Dk; ++i) g[i] = rng.normal(stream, i);
    orthonormalise_rows(g, Dk);
    const int64_t rows = std::min(Dk, m - block * Dk);
    for (int64_t i = 0; i < rows; ++i) {
      double sq = 0;
      for (int64_t l = 0; l < Dk; ++l) {
        double z = rng.normal(stream + 1, i * Dk + l);
        sq += z * z;
      }
      const double norm = std::sqrt(sq);  // chi with Dk degrees of freedom
      for (int64_t l = 0; l < Dk; ++l)
        w[(block * Dk + i) * Dk + l] = static_cast<float>(g[i * Dk + l] * norm);
    }
  }
  return w;
}

float favor_key_shift(const float* w, int64_t m, int64_t Dk) {
  double top = 0;
  for (int64_t j = 0; j < m; ++j) {
    double sq = 0;
    for (int64_t l = 0; l < Dk; ++l) sq += static_cast<double>(w[j * Dk + l]) * w[j * Dk + l];
    top = std::max(top, 0.5 * sq);
  }
  return static_cast<float>(std::max(0.0, top - kFavorKeyHeadroom));
}

FeatureMap elu_feature_map() { return FeatureMap{}; }

FeatureMap favor_feature_map(const float* w, int64_t m, int64_t Dk) {
  FeatureMap map;
  map.kind = FeatureMapKind::Favor;
  map.favor_w = w;
  map.favor_m = m;
  map.favor_key_shift = favor_key_shift(w, m, Dk);
  return map;
}

void feature_map_forward(const FeatureMap& map, FeatureRole role, const TensorView& x,
                         const TensorView& phi) {
  const Dims d = check_pair(map, x, phi, "phi");
  if (map.kind == FeatureMapKind::EluPlusOne) {
    static const auto elu_row = RETNET_ISA_VARIANT(kernel_isa(), elu_plus_one_row);
    for_each_row(d, [&](int64_t b, int64_t t, int64_t h) {
      elu_row(&x.at(b, t, h, 0), &phi.at(b, t, h, 0), d.D);
    });
    return;
  }
  Arena none;  // the forward needs no scratch
  detail::for_each_head(d.B, d.H, none, 0, [&](int64_t b, int64_t h, float*) {
    favor_head(map, role, &x.at(b, 0, h, 0), x.stride[1], &phi.at(b, 0, h, 0), phi.stride[1], d.T,
               d.D);
  });
}

size_t feature_map_backward_workspace_floats(const FeatureMap& map, int64_t B, int64_t T,
                                             int64_t H) {
  if (map.kind == FeatureMapKind::EluPlusOne) return 0;
  return detail::head_loop_footprint(B, H, static_cast<size_t>(T * map.favor_m));
}

void feature_map_backward(const FeatureMap& map, const TensorView& x, const TensorView& phi,
                          const TensorView& d_phi, const TensorView& d_x, Arena& arena) {
  const Dims d = check_pair(map, x, phi, "phi");
  check_pair(map, x, d_phi, "d_phi");
  check_same(d, check_view(d_x, "d_x"), "d_x");
  if (map.kind == FeatureMapKind::EluPlusOne) {
    static const auto elu_row_backward =
        RETNET_ISA_VARIANT(kernel_isa(), elu_plus_one_row_backward);
    for_each_row(d, [&](int64_t b, int64_t t, int64_t h) {
      elu_row_backward(&x.at(b, t, h, 0), &phi.at(b, t, h, 0), &d_phi.at(b, t, h, 0),
                       &d_x.at(b, t, h, 0), d.D);
    });
    return;
  }
  detail::for_each_head(d.B, d.H, arena, d.T * map.favor_m, [&](int64_t b, int64_t h, float* c) {
    favor_head_backward(map, &x.at(b, 0, h, 0), x.stride[1], &phi.at(b, 0, h, 0), phi.stride[1],
                        &d_phi.at(b, 0, h, 0), d_phi.stride[1], &d_x.at(b, 0, h, 0),
                        d_x.stride[1], d.T, d.D, c);
  });
}

void feature_map_reference(const FeatureMap& map, FeatureRole role, const double* x, int64_t Dk,
                           double* phi) {
  if (map.kind == FeatureMapKind::EluPlusOne) {
    for (int64_t i = 0; i < Dk; ++i) phi[i] = x[i] > 0 ? x[i] + 1 : std::exp(x[i]);
    return;
  }
  const int64_t m = map.favor_m;
  const double inv_root4 = std::pow(static_cast<double>(Dk), -0.25);
  double sq = 0;
  for (int64_t i = 0; i < Dk; ++i) sq += x[i] * x[i] * inv_root4 * inv_root4;
  std::vector<double> e(m);
  for (int64_t j = 0; j < m; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < Dk; ++i) dot += map.favor_w[j * Dk + i] * x[i] * inv_root4;
    e[j] = dot - 0.5 * sq;
  }
  const double shift = role == FeatureRole::Query ? *std::max_element(e.begin(), e.end())
                                                  : static_cast<double>(map.favor_key_shift);
  for (int64_t j = 0; j < m; ++j) phi[j] = std::exp(e[j] - shift) / std::sqrt(double(m));
}

}  // namespace retnet
