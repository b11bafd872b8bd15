#include "retnet/core/gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "retnet/core/cpu_isa.h"
#include "retnet/core/error.h"

namespace retnet {
namespace {

// CBLAS enum values (cblas.h); we do not include cblas.h so that no BLAS is linked at build time.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using SgemvFn = void (*)(int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);
using SetThreadsFn = void (*)(int);
using GetStringFn = char* (*)();

struct Blas {
  SgemmFn sgemm = nullptr;
  SgemvFn sgemv = nullptr;
  SetThreadsFn set_threads = nullptr;
  BlasInfo info;
};

// The OpenBLAS core type for this CPU: the newest kernel family whose instructions it has and
// RETNET_MAX_ISA allows (under "scalar", OpenBLAS's SSE3 kernels: x86-64's floor).
const char* coretype_for_this_cpu() {
  switch (kernel_isa()) {
    case Isa::Avx512:
      return "SkylakeX";
    case Isa::Avx2:
      return "Haswell";
    default:
      break;
  }
  __builtin_cpu_init();
  if (!isa_allowed(Isa::Avx2) && __builtin_cpu_supports("sse3")) return "Prescott";
  return nullptr;
}

Blas load_blas() {
  Blas b;
  // The engine picks the kernel family from cpuid and overrides an inherited OPENBLAS_CORETYPE:
  // a machine-wide OPENBLAS_CORETYPE=Haswell slows GEMM on an AVX-512 CPU (docs/gemm.md).
  // RETNET_BLAS_CORETYPE overrides the engine's choice.
  const char* forced = std::getenv("RETNET_BLAS_CORETYPE");
  const char* core = forced && *forced ? forced : coretype_for_this_cpu();
  const char* inherited = std::getenv("OPENBLAS_CORETYPE");
  std::string previous = inherited ? inherited : "";
  if (core) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    b.info.coretype = core;
  } else if (inherited) {
    b.info.coretype = inherited;
  }
  // The OpenMP build shares our OpenMP thread pool (no oversubscription); others are fallbacks.
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("RETNET_BLAS_LIBRARY")) candidates.push_back(path);
  candidates.push_back("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0");
  candidates.push_back("/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0");
  candidates.push_back("libopenblas.so.0");
  candidates.push_back("libopenblas.so");
  void* handle = nullptr;
  for (const auto& path : candidates) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      b.info.library = path;
      break;
    }
  }
  // OpenBLAS read the variable while loading; give other libraries of the process their value back.
  if (core) {
    if (inherited) setenv("OPENBLAS_CORETYPE", previous.c_str(), 1);
    else unsetenv("OPENBLAS_CORETYPE");
  }
  RETNET_CHECK(handle != nullptr,
               "no BLAS library found (tried {} and others); install libopenblas0-openmp "
               "(scripts/install-deps.sh) or set RETNET_BLAS_LIBRARY",
               candidates.size() > 1 ? candidates[1] : candidates[0]);
  b.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "cblas_sgemm"));
  b.sgemv = reinterpret_cast<SgemvFn>(dlsym(handle, "cblas_sgemv"));
  RETNET_CHECK(b.sgemm && b.sgemv, "{} has no cblas_sgemm/cblas_sgemv", b.info.library);
  b.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(handle, "openblas_set_num_threads"));
  if (auto f = reinterpret_cast<GetStringFn>(dlsym(handle, "openblas_get_corename")))
    b.info.corename = f();
  if (auto f = reinterpret_cast<GetStringFn>(dlsym(handle, "openblas_get_config")))
    b.info.config = f();
  return b;
}

Blas& blas() {
  static Blas instance = load_blas();
  return instance;
}

int to_int(int64_t v, const char* what) {
  RETNET_CHECK(v >= 0 && v <= 0x7fffffff, "GEMM {} = {} does not fit the BLAS integer type", what,
               v);
  return static_cast<int>(v);
}

}  // namespace

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS leaves C untouched when K = 0; the contract says C = beta * C.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  if (trans_a == Trans::No && trans_b == Trans::Yes && M <= kSkinnyMaxRows && alpha == 1.f) {
    skinny_gemm_nt(M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // A one-row product is a matrix-vector product: OpenBLAS's sgemm does not hand it to sgemv
  // and runs several times slower on it (docs/design-notes.md#one-row-products).
  if (M == 1) {
    // y[N] = op(B)^T a: with B [K,N] that is B^T a; with B^T stored [N,K] it is B a.
    int64_t incx = trans_a == Trans::No ? 1 : lda;
    if (incx == 1) {
      // Uninitialised arena memory may hold NaN bit patterns; make beta = 0 mean "overwrite".
      if (beta == 0.f) std::fill(C, C + N, 0.f);
      if (trans_b == Trans::No)
        blas().sgemv(kRowMajor, kTrans, to_int(K, "K"), to_int(N, "N"), alpha, B,
                     to_int(ldb, "ldb"), A, 1, beta, C, 1);
      else
        blas().sgemv(kRowMajor, kNoTrans, to_int(N, "N"), to_int(K, "K"), alpha, B,
                     to_int(ldb, "ldb"), A, 1, beta, C, 1);
      return;
    }
  }
  blas().sgemm(kRowMajor, trans_a == Trans::No ? kNoTrans : kTrans,
               trans_b == Trans::No ? kNoTrans : kTrans, to_int(M, "M"), to_int(N, "N"),
               to_int(K, "K"), alpha, A, to_int(lda, "lda"), B, to_int(ldb, "ldb"), beta, C,
               to_int(ldc, "ldc"));
}

void sgemv(Trans trans_a, int64_t M, int64_t N, float alpha, const float* A, int64_t lda,
           const float* x, float beta, float* y) {
  blas().sgemv(kRowMajor, trans_a == Trans::No ? kNoTrans : kTrans, to_int(M, "M"),
               to_int(N, "N"), alpha, A, to_int(lda, "lda"), x, 1, beta, y, 1);
}

void sgemm_reference(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                     int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = trans_a == Trans::No ? A[i * lda + k] : A[k * lda + i];
        double b = trans_b == Trans::No ? B[k * ldb + j] : B[j * ldb + k];
        acc += a * b;
      }
      double c = beta == 0.f ? 0.0 : static_cast<double>(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(alpha * acc + c);
    }
}

void blas_set_num_threads(int n) {
  if (blas().set_threads) blas().set_threads(n);
}

const BlasInfo& blas_info() { return blas().info; }

}  // namespace retnet
