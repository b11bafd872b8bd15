// The product, row reads and embedding lookups of a Weight (retnet/model/weight_ops.h): the one
// place that asks a weight's placement and element type and picks the kernel for them.
#include "retnet/model/weight_ops.h"

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/half.h"
#include "retnet/core/parallel.h"
#include "retnet/core/quant.h"

namespace retnet {
namespace {

[[noreturn]] void refuse(const Weight& w, const char* what) {
  throw Error(fmt::format("weight '{}': {} of {} weights {} is not supported", w.name, what,
                          element_type_name(w.type), placement_name(w.placement)));
}

// The stored tensors of an in-place weight (q|k|v|g: one part each) in one call.
template <typename T>
void in_place_product(const Weight& w, int64_t M, const float* x, int64_t ldx, float beta, float* y,
                      int64_t ldy) {
  const int parts = static_cast<int>(w.parts.size());
  RETNET_CHECK(parts >= 1 && parts <= kMaxRowMajorParts,
               "weight '{}' is stored as {} tensors: 1 to {} can be used in place", w.name, parts,
               kMaxRowMajorParts);
  const T* data[kMaxRowMajorParts];
  int64_t rows[kMaxRowMajorParts];
  for (int i = 0; i < parts; ++i) {
    data[i] = static_cast<const T*>(w.parts[static_cast<size_t>(i)].data);
    rows[i] = w.parts[static_cast<size_t>(i)].rows;
  }
  rowmajor_gemm_nt_parts(M, w.K, x, ldx, parts, data, rows, beta, y, ldy);
}

}  // namespace

void matmul(const Weight& w, int64_t M, const float* x, int64_t ldx, float beta, float* y,
            int64_t ldy) {
  const int64_t N = w.N, K = w.K;
  switch (w.placement) {
    case Placement::Panels:
      if (const auto quant = quant_type_of(w.type))
        return quant_gemm_nt(*quant, M, N, K, x, ldx, w.as<uint8_t>(), beta, y, ldy);
      switch (w.type) {
        case ElementType::F32:
          if (w.rows_f32 && M > kSkinnyMaxRows)
            return sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, w.rows_f32, K, beta, y, ldy);
          return packed_gemm_nt(M, N, K, x, ldx, w.as<float>(), beta, y, ldy);
        case ElementType::F16:
          return packed_gemm_nt_f16(M, N, K, x, ldx, w.as<uint16_t>(), beta, y, ldy);
        case ElementType::BF16:
          return packed_gemm_nt_bf16(M, N, K, x, ldx, w.as<BFloat16>(), beta, y, ldy);
        default:
          break;
      }
      break;
    case Placement::InPlace:
      check_finite_in_place(w);
      switch (w.type) {
        case ElementType::F32:
          return in_place_product<float>(w, M, x, ldx, beta, y, ldy);
        case ElementType::F16:
          return in_place_product<uint16_t>(w, M, x, ldx, beta, y, ldy);
        case ElementType::BF16:
          return in_place_product<BFloat16>(w, M, x, ldx, beta, y, ldy);
        default:
          break;
      }
      break;
    case Placement::Plain:
      switch (w.type) {
        case ElementType::F32:
          return sgemm(Trans::No, Trans::Yes, M, N, K, 1.f, x, ldx, w.as<float>(), K, beta, y, ldy);
        case ElementType::F16:
          return rowmajor_gemm_nt(M, N, K, x, ldx, w.as<uint16_t>(), K, beta, y, ldy);
        case ElementType::BF16:
          return rowmajor_gemm_nt(M, N, K, x, ldx, w.as<BFloat16>(), K, beta, y, ldy);
        default:
          break;
      }
      break;
  }
  refuse(w, "a product");
}

void weight_row(const Weight& w, int64_t n, float scale, float* out) {
  const int64_t K = w.K;
  switch (w.placement) {
    case Placement::Panels:
      if (const auto quant = quant_type_of(w.type)) {
        dequantize_panel_rows(*quant, w.as<uint8_t>(), K, n, 1, out, K);
        for (int64_t i = 0; i < K; ++i) out[i] *= scale;
        return;
      }
      switch (w.type) {
        case ElementType::F32:
          return packed_row(w.as<float>(), K, n, scale, out);
        case ElementType::F16:
          return packed_row(w.as<uint16_t>(), K, n, scale, out);
        case ElementType::BF16:
          return packed_row(w.as<BFloat16>(), K, n, scale, out);
        default:
          break;
      }
      break;
    case Placement::InPlace:
      for (const InPlaceRows& part : w.parts) {
        if (n < part.first_row || n >= part.first_row + part.rows) continue;
        const int64_t r = n - part.first_row;
        switch (w.type) {
          case ElementType::F32:
            return rowmajor_row(static_cast<const float*>(part.data), K, K, r, scale, out);
          case ElementType::F16:
            return rowmajor_row(static_cast<const uint16_t*>(part.data), K, K, r, scale, out);
          case ElementType::BF16:
            return rowmajor_row(static_cast<const BFloat16*>(part.data), K, K, r, scale, out);
          default:
            refuse(w, "reading a row");
        }
      }
      throw Error(fmt::format("weight '{}': row {} is outside its {} rows", w.name, n, w.N));
    case Placement::Plain:
      switch (w.type) {
        case ElementType::F32:
          return rowmajor_row(w.as<float>(), K, K, n, scale, out);
        case ElementType::F16:
          return rowmajor_row(w.as<uint16_t>(), K, K, n, scale, out);
        case ElementType::BF16:
          return rowmajor_row(w.as<BFloat16>(), K, K, n, scale, out);
        default:
          break;
      }
      break;
  }
  refuse(w, "reading a row");
}

void embed_rows(const Weight& w, const int32_t* tokens, int64_t N, float scale, float* x) {
  // Refused here, not inside the parallel loop (an exception must not leave it).
  if (quant_type_of(w.type) && w.placement != Placement::Panels) refuse(w, "reading a row");
  check_finite_in_place(w);
  const int64_t d = w.K;
  parallel_for_if(N * d > 65536, N, [&](int64_t n) { weight_row(w, tokens[n], scale, x + n * d); });
}

}  // namespace retnet
