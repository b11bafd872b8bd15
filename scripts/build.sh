#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR), installing dependencies first if missing.
#
# DEPS names the dependency groups of scripts/install-deps.sh (default "runtime"; e.g.
# DEPS="test bench"). It also decides what is configured, so the build never asks CMake for a
# library that was not installed, and a build directory reused by another job is reconfigured to
# match: RETNET_BUILD_TESTS is ON only with "test", RETNET_BUILD_BENCHMARKS only with "test" or
# "bench"; with "test" or "mpi" MPI is required (RETNET_MPI=ON), and MPI is looked for afresh, so
# that a build directory configured before OpenMPI was installed (by the main job) builds the MPI
# tests instead of skipping them. Extra arguments go to CMake after these and win, e.g.
#   DEPS=test bash scripts/build.sh -DRETNET_SANITIZE=ON -DRETNET_BUILD_BENCHMARKS=OFF
# BUILD_TYPE (default Release) and BUILD_TARGET (default: all targets) also apply.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${DEPS:-runtime}
# shellcheck disable=SC2086  # DEPS is a list of words
bash scripts/install-deps.sh $DEPS
TESTS=OFF
BENCHMARKS=OFF
MPI_ARGS=()
for g in $DEPS; do
  case "$g" in
    test) TESTS=ON; BENCHMARKS=ON; MPI_ARGS=(-U "MPI_*" -DRETNET_MPI=ON) ;;
    mpi) MPI_ARGS=(-U "MPI_*" -DRETNET_MPI=ON) ;;
    bench) BENCHMARKS=ON ;;
  esac
done
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DRETNET_BUILD_TESTS="$TESTS" -DRETNET_BUILD_BENCHMARKS="$BENCHMARKS" "${MPI_ARGS[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" ${BUILD_TARGET:+--target $BUILD_TARGET}
