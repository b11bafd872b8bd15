#!/usr/bin/env bash
# Installs a built tree into a fresh prefix, builds tests/consumer against it with
# find_package(retnet), and runs it.  check_consumer.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for internal in core/gemm.h core/quant.h core/safetensors.h core/arena.h model/state.h; do
  if [ -e "$work/prefix/include/retnet/$internal" ]; then
    echo "internal header installed: include/retnet/$internal" >&2
    exit 1
  fi
done
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$here" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" --parallel 2
"$work/build/consumer" "$work"
