#!/usr/bin/env bash
# Builds and runs the GEMM backend comparison (needs libblis-dev and libdnnl-dev besides the
# engine's dependencies). Prints one line per backend, core type, thread count and shape.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p bin
g++ -O3 -march=native -fopenmp gemm_backends.cpp -o bin/gemm_backends -ldnnl -ldl
OB=/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
BLIS=/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4
for t in 1 2; do
  for core in SkylakeX Haswell Zen Prescott; do
    OPENBLAS_CORETYPE=$core ./bin/gemm_backends openblas:$OB $t
  done
  env -u OPENBLAS_CORETYPE ./bin/gemm_backends openblas:$OB $t
  OMP_NUM_THREADS=$t BLIS_NUM_THREADS=$t ./bin/gemm_backends blis:$BLIS $t
  OMP_NUM_THREADS=$t ./bin/gemm_backends dnnl $t
done
