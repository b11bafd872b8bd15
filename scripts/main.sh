#!/usr/bin/env bash
# The main job on the embedded default: installs dependencies if missing, builds, then runs the
# default RetNet over the bundled corpus in all four forms (agreement and speed) and decodes from
# its recurrent state (decode speed and memory). Extra arguments go to `retnet demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TARGET=retnet bash scripts/build.sh
./build/retnet demo "$@"
