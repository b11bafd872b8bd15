#pragma once
// Kernels compiled once per instruction-set level. CMake (retnet_isa_kernels in CMakeLists.txt)
// builds each kernel file three times, with the level's -m flags and RETNET_ISA_NS set to
// isa_scalar, isa_avx2 or isa_avx512, so one source's `#if defined(__AVX512F__)` bodies give one
// variant per level in one binary; callers take the variant of kernel_isa() (cpu_isa.h).
// A kernel file keeps its entry points in namespace retnet::RETNET_ISA_NS and its helpers
// file-local: an inline function it emits out of line would be one symbol shared by every level.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/half.h"

// Declares the entry point `decl` in each level's namespace (use inside namespace retnet).
#define RETNET_ISA_DECLARE(...) \
  namespace isa_scalar {        \
  __VA_ARGS__;                  \
  }                             \
  namespace isa_avx2 {          \
  __VA_ARGS__;                  \
  }                             \
  namespace isa_avx512 {        \
  __VA_ARGS__;                  \
  }

// The variant of entry point `name` for `level`.
#define RETNET_ISA_VARIANT(level, name)                                                \
  ::retnet::isa_variant(level, &::retnet::isa_scalar::name, &::retnet::isa_avx2::name, \
                        &::retnet::isa_avx512::name)

namespace retnet {

template <typename F>
F isa_variant(Isa level, F scalar, F avx2, F avx512) {
  switch (level) {
    case Isa::Avx512:
      return avx512;
    case Isa::Avx2:
      return avx2;
    default:
      return scalar;
  }
}

// Entry points of the per-level kernel files (gemm_skinny.cpp, gemm_packed_kernels.cpp): the
// contracts of skinny_gemm_nt and of packed_gemm_nt* for M <= kSkinnyMaxRows (retnet/core/gemm.h).
RETNET_ISA_DECLARE(void skinny_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc))
RETNET_ISA_DECLARE(void packed_rows_f32(int64_t M, int64_t N, int64_t K, const float* A,
                                        int64_t lda, const float* packed, float beta, float* C,
                                        int64_t ldc))
RETNET_ISA_DECLARE(void packed_rows_f16(int64_t M, int64_t N, int64_t K, const float* A,
                                        int64_t lda, const uint16_t* packed, float beta, float* C,
                                        int64_t ldc))
RETNET_ISA_DECLARE(void packed_rows_bf16(int64_t M, int64_t N, int64_t K, const float* A,
                                         int64_t lda, const BFloat16* packed, float beta, float* C,
                                         int64_t ldc))

// One level's variant whatever kernel_isa() chose, for tests and measurements. `level` above
// cpu_isa() throws retnet::Error. M <= kSkinnyMaxRows.
void skinny_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void packed_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const float* packed, float beta, float* C, int64_t ldc);
void packed_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const uint16_t* packed, float beta, float* C, int64_t ldc);
void packed_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const BFloat16* packed, float beta, float* C, int64_t ldc);

// The kernel chosen per family, in order: packed, skinny, rowmajor, quant, ops (norms, gated
// activations, rotations, the optimizer: retnet/ops/ops_isa.h) and mixers (the token mixers'
// loops: retention's, linear attention's, attention's, AFT's and decay attention's per-level
// files under src/mixers, and the feature maps' exponentials) (the <family>_decode_kernel fields
// of the bench machine record).
std::vector<std::pair<std::string, std::string>> kernel_choices();
// One line naming them and the level they follow, e.g. "avx512 (cpu avx512, RETNET_MAX_ISA
// unset): packed avx512, skinny avx512, rowmajor avx512, quant avx512-vnni-512, ops avx512,
// mixers avx512".
std::string kernel_summary();

}  // namespace retnet
