// dev/: GEMM backend comparison behind docs/gemm.md ("The backends compared") (not part of the engine).
// Usage: gemm_backends BACKEND THREADS, BACKEND = openblas:PATH | blis:PATH | dnnl.
// Each run is its own process: OpenBLAS reads OPENBLAS_CORETYPE when it loads.
#include <dlfcn.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);
using Str = char* (*)();
using SetThreads = void (*)(int);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s openblas:PATH|blis:PATH|dnnl THREADS\n", argv[0]);
    return 2;
  }
  std::string backend = argv[1];
  int threads = std::atoi(argv[2]);
  omp_set_num_threads(threads);
  Sgemm sgemm = nullptr;
  std::string core = "-";
  if (backend != "dnnl") {
    std::string path = backend.substr(backend.find(':') + 1);
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
      return 1;
    }
    sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    if (auto f = reinterpret_cast<Str>(dlsym(h, "openblas_get_corename"))) core = f();
    if (auto f = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"))) f(threads);
    if (auto f = reinterpret_cast<SetThreads>(dlsym(h, "bli_thread_set_num_threads"))) f(threads);
  }
  struct Shape {
    int M, N, K;
  };
  for (Shape s : {Shape{1024, 1024, 1024}, Shape{2048, 1536, 256}, Shape{2048, 256, 512},
                  Shape{2048, 256, 256}, Shape{1, 1536, 256}}) {
    std::vector<float> A(size_t(s.M) * s.K, 0.5f), B(size_t(s.N) * s.K, 0.25f),
        C(size_t(s.M) * s.N);
    auto run = [&] {
      if (sgemm)  // row-major C = A B^T
        sgemm(101, 111, 112, s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.K, 0.f, C.data(), s.N);
      else
        dnnl_sgemm('N', 'T', s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.K, 0.f, C.data(), s.N);
    };
    double flop = 2.0 * s.M * s.N * s.K;
    int inner = std::max(1, int(2e8 / flop));
    run();
    std::vector<double> g;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < inner; ++i) run();
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      g.push_back(flop * inner / dt / 1e9);
    }
    std::sort(g.begin(), g.end());
    std::printf("%-10s core=%-9s threads=%d %5dx%5dx%5d  median %6.1f GFLOP/s (min %.1f, max %.1f)\n",
                backend.substr(0, backend.find(':')).c_str(), core.c_str(), threads, s.M, s.N, s.K,
                g[3], g[0], g[6]);
  }
  return 0;
}
