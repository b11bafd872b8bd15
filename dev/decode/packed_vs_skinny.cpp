// Decode products alone: the packed panel kernel against the skinny dot-product kernel and
// OpenBLAS (alpha != 1 keeps sgemm off the skinny path), qkvg shape [1536, 256], M = 1..64 rows,
// medians of 200 calls. Build like gemv_sweep.cpp; run with an argument for 2 threads.
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <omp.h>
#include "retnet/core/gemm.h"
using namespace retnet;
template<class F> double med(F f){ std::vector<double> ts; for(int r=0;r<200;r++){ auto t0=std::chrono::steady_clock::now(); f(); ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count()); } std::sort(ts.begin(),ts.end()); return ts[ts.size()/2]; }
int main(int argc, char**){ omp_set_num_threads(argc>1?2:1);
  for (int64_t M : {1, 4, 16, 64}) {
    int64_t N=1536, K=256; std::vector<float> A(M*K,1.f), B(N*K,0.01f), C(M*N);
    std::vector<float> P(packed_weight_elements(N,K)); pack_weights(B.data(),N,K,K,P.data());
    double t1=med([&]{skinny_gemm_nt(M,N,K,A.data(),K,B.data(),K,0.f,C.data(),N);});
    double t2=med([&]{packed_gemm_nt(M,N,K,A.data(),K,P.data(),0.f,C.data(),N);});
    double t3=med([&]{sgemm(Trans::No,Trans::Yes,M,N,K,0.999f,A.data(),K,B.data(),K,0.f,C.data(),N);});
    auto g=[&](double t){return 2.0*M*N*K/t/1e9;};
    printf("M=%ld: skinny %.1f, packed %.1f, openblas %.1f GFLOP/s\n", M, g(t1), g(t2), g(t3));
  }
}
