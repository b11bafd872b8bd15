#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR), installing dependencies first if missing.
# Extra arguments go to CMake, e.g. scripts/build.sh -DRETNET_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" ${BUILD_TARGET:+--target $BUILD_TARGET}
