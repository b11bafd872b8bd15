#!/usr/bin/env bash
# The main job on the embedded default: installs the runtime dependencies if missing, builds the
# `retnet` command, trains the default small RetNet on the bundled Tiny Shakespeare for a few
# minutes, evaluates it, runs it in all four forms (agreement, speed), then generates a sample with
# `retnet generate` (chunkwise prefill, recurrent decoding, sampling) and prints decode speed and
# memory. TRAIN_SECONDS (default 180) sets the training budget; extra arguments go to `retnet demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the `retnet` command: no tests or benchmarks, so only the runtime packages are needed.
DEPS=runtime BUILD_TARGET=retnet bash scripts/build.sh -DRETNET_BUILD_TESTS=OFF -DRETNET_BUILD_BENCHMARKS=OFF
RUN=${RUN_DIR:-runs/main}
./build/retnet train --data data/tinyshakespeare.txt --out "$RUN" --time-budget "${TRAIN_SECONDS:-180}" \
  --eval-interval 200 --log-interval 20 --overwrite
./build/retnet eval --model "$RUN/model.safetensors" --data data/tinyshakespeare.txt --tail 0.1
./build/retnet demo --model "$RUN/model.safetensors" --decode 0 "$@"
echo
echo "== retnet generate -m $RUN/model.safetensors -p 'ROMEO:' -n 400 --temp 0.8 -s 1 --stats"
./build/retnet generate -m "$RUN/model.safetensors" -p "ROMEO:" -n 400 --temp 0.8 --top-k 40 -s 1 --stats
