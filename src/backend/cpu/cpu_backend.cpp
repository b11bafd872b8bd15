// The CPU backend: the engine's own kernels (packed, row-major, skinny and quantised GEMMs, the
// vectorised norms and activations, each mixer's blocks).
#include <cstring>

#include "retnet/backend/backend.h"
#include "retnet/backend/cpu_kernels.h"
#include "retnet/core/finite_check.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/half.h"
#include "retnet/core/parallel.h"
#include "retnet/core/quant.h"
#include "retnet/model/mixer_layer.h"
#include "retnet/ops/activation.h"
#include "retnet/ops/rmsnorm.h"
#include "retnet/ops/rotation.h"

namespace retnet::detail {

void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
             int64_t ldx, bool accumulate, float* y, int64_t ldy) {
  const float beta = accumulate ? 1.f : 0.f;
  // The packed copy serves decoding (few rows), and prefill too when it is the only copy or in
  // half precision (prefill and decode then compute with the same weights); a float32 model that
  // kept its originals prefills straight from them.
  const PackedProjection* p = model.packed(w);
  if (p && !p->in_place.empty() && p->N == N && p->K == K) {  // weights used where they lie
    // The product's tensors (q|k|v|g, fc1|gate: one slice each) in one call.
    const int parts = static_cast<int>(p->in_place.size());
    const float* f32[kMaxRowMajorParts];
    const uint16_t* f16[kMaxRowMajorParts];
    const BFloat16* bf16[kMaxRowMajorParts];
    int64_t rows[kMaxRowMajorParts];
    for (int i = 0; i < parts; ++i) {
      const RowMajorSlice& s = p->in_place[static_cast<size_t>(i)];
      check_finite_in_place(s, K);
      f32[i] = s.f32;
      f16[i] = s.f16;
      bf16[i] = s.bf16;
      rows[i] = s.rows;
    }
    if (f32[0])
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, f32, rows, beta, y, ldy);
    else if (f16[0])
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, f16, rows, beta, y, ldy);
    else
      rowmajor_gemm_nt_parts(M, K, x, ldx, parts, bf16, rows, beta, y, ldy);
    return;
  }
  const bool use_packed =
      p && p->N == N && p->K == K && (M <= kSkinnyMaxRows || !p->f32 || !model.weights_complete());
  if (!use_packed)
    sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, model.param(w), K, beta, y, ldy);
  else if (p->quant)
    quant_gemm_nt(p->quant_type, M, N, K, x, ldx, p->quant, beta, y, ldy);
  else if (p->f16)
    packed_gemm_nt_f16(M, N, K, x, ldx, p->f16, beta, y, ldy);
  else if (p->bf16)
    packed_gemm_nt_bf16(M, N, K, x, ldx, p->bf16, beta, y, ldy);
  else
    packed_gemm_nt(M, N, K, x, ldx, p->f32, beta, y, ldy);
}

void embed_tokens(const Model& model, const int32_t* tokens, int64_t N, float* x) {
  const Config& c = model.config();
  const ModelTensors& w = model.tensors();
  const int64_t d = c.embed_dim;
  const float scale = static_cast<float>(c.embed_scale());
  // A model prepared for inference in f16/bf16 keeps its embedding rows in that type too
  // (row-major, under the embedding's packed entry; a tied one: the LM head's panels).
  const PackedProjection* half_embed = model.packed(w.embed);
  if (half_embed && !half_embed->in_place.empty()) {
    // Rows read where they lie (a mapped file; tied: the LM head's own rows).
    const RowMajorSlice& s = half_embed->in_place.front();
    check_finite_in_place(s, d);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      float* row = x + n * d;
      if (s.f32)
        rowmajor_row(s.f32, d, d, tokens[n], scale, row);
      else if (s.f16)
        rowmajor_row(s.f16, d, d, tokens[n], scale, row);
      else
        rowmajor_row(s.bf16, d, d, tokens[n], scale, row);
    });
  } else if (half_embed && w.embed == w.output_projection) {
    // A tied embedding is the LM head: its rows are read from the head's panels.
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      float* row = x + n * d;
      if (half_embed->quant) {
        dequantize_panel_rows(half_embed->quant_type, half_embed->quant, d, tokens[n], 1, row, d);
        for (int64_t i = 0; i < d; ++i) row[i] *= scale;
      } else if (half_embed->f32)
        packed_row(half_embed->f32, d, tokens[n], scale, row);
      else if (half_embed->bf16)
        packed_row(half_embed->bf16, d, tokens[n], scale, row);
      else
        packed_row(half_embed->f16, d, tokens[n], scale, row);
    });
  } else if (half_embed) {
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      const size_t row = static_cast<size_t>(tokens[n]) * d;
      for (int64_t i = 0; i < d; ++i)
        x[n * d + i] = scale * (half_embed->bf16 ? bf16_to_float(half_embed->bf16[row + i].bits)
                                                 : half_to_float(half_embed->f16[row + i]));
    });
  } else {
    const float* embed = model.param(w.embed);
    parallel_for_if(N * d > 65536, N, [&](int64_t n) {
      for (int64_t i = 0; i < d; ++i) x[n * d + i] = scale * embed[tokens[n] * d + i];
    });
  }
}

namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void project(const Model& model, size_t w, int64_t M, int64_t N, int64_t K, const float* x,
               int64_t ldx, bool accumulate, float* y, int64_t ldy) const override {
    detail::project(model, w, M, N, K, x, ldx, accumulate, y, ldy);
  }

  void embed(const Model& model, const int32_t* tokens, int64_t N, float* x) const override {
    embed_tokens(model, tokens, N, x);
  }

  void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, float* rstd,
               int64_t N, int64_t D, float eps) const override {
    rmsnorm_forward(x, ldx, w, y, ldy, rstd, N, D, eps);
  }

  void gated_activation(Activation act, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* out, int64_t ldo, int64_t N, int64_t D) const override {
    gated_activation_forward(act, a, lda, b, ldb, out, ldo, N, D);
  }

  int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                         const int64_t* positions, float* table) const override {
    return retnet::rotation_table(thetas, B, T, positions, table);
  }

  const float* mixer_forward(const LayerMixer& mixer, const MixerPass& pass,
                             Arena& arena) const override {
    return mixer.forward(pass, arena);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace retnet::detail
