#!/usr/bin/env bash
# The main job on the embedded default: installs dependencies if missing, builds, trains the
# default small RetNet on the bundled Tiny Shakespeare for a few minutes, evaluates it, then runs
# it in all four forms (agreement, speed) and decodes a sample from its recurrent state (decode
# speed, memory). TRAIN_SECONDS (default 180) sets the training budget; extra arguments go to
# `retnet demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TARGET=retnet bash scripts/build.sh
RUN=${RUN_DIR:-runs/main}
./build/retnet train --data data/tinyshakespeare.txt --out "$RUN" --time-budget "${TRAIN_SECONDS:-180}" \
  --eval-interval 200 --log-interval 20
./build/retnet eval --model "$RUN/model.safetensors" --data data/tinyshakespeare.txt --tail 0.1
./build/retnet demo --model "$RUN/model.safetensors" "$@"
