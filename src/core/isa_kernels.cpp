// The level choice of the per-level kernel files (retnet/core/isa_kernels.h) and the report of
// what every kernel family runs.
#include "retnet/core/isa_kernels.h"

#include <cstdlib>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/gemm_rowmajor.h"
#include "retnet/core/quant.h"

namespace retnet {

using SkinnyFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);

void skinny_gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc) {
  static const SkinnyFn kernel = RETNET_ISA_VARIANT(kernel_isa(), skinny_rows);
  kernel(M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void skinny_gemm_nt_at(Isa level, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  RETNET_CHECK(level <= cpu_isa(), "skinny_gemm_nt_at: level {} above this CPU's {}",
               isa_name(level), isa_name(cpu_isa()));
  RETNET_ISA_VARIANT(level, skinny_rows)(M, N, K, A, lda, B, ldb, beta, C, ldc);
}

std::vector<std::pair<std::string, std::string>> kernel_choices() {
  const std::string level = isa_name(kernel_isa());
  return {{"packed", level},
          {"skinny", level},
          {"rowmajor", rowmajor_kernel_name(rowmajor_kernel_best())},
          {"quant", quant_kernel_name(quant_kernel_best())},
          {"ops", level},
          {"mixers", level}};
}

std::string kernel_summary() {
  const char* cap = std::getenv("RETNET_MAX_ISA");
  std::string out = fmt::format("{} (cpu {}, RETNET_MAX_ISA {}):", isa_name(kernel_isa()),
                                isa_name(cpu_isa()), cap && *cap ? cap : "unset");
  const auto choices = kernel_choices();
  for (size_t i = 0; i < choices.size(); ++i)
    out += fmt::format("{} {} {}", i ? "," : "", choices[i].first, choices[i].second);
  return out;
}

}  // namespace retnet
