#!/usr/bin/env bash
# The models of speculative decoding's benefit benchmark (`retnet bench speculative --benefit`),
# trained on the bundled Tiny Shakespeare with the byte tokenizer, each only if its model file is
# missing (so a second run reuses them):
#   $DIR/draft   the default-size model (3.8 M parameters), the draft;
#   $DIR/hybrid  configs/spec-hybrid-41m.json: retention with attention every fourth layer;
#   $DIR/retnet  configs/spec-retnet-44m.json: the pure RetNet of nearly the same size.
# DIR (default runs/spec), RETNET (default build/retnet), DRAFT_SECONDS (default 300) and
# TARGET_SECONDS (default 2100) set where, with what and for how long. The two targets train side
# by side on one thread each (THREADS per run, default 1); the draft trains beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-runs/spec}
RETNET=${RETNET:-build/retnet}
DATA=data/tinyshakespeare.txt
THREADS=${THREADS:-1}
mkdir -p "$DIR"

train() {  # name, seconds, extra options...
  local name=$1 seconds=$2
  shift 2
  if [ -f "$DIR/$name/model.safetensors" ]; then
    echo "$DIR/$name/model.safetensors exists: reused"
    return
  fi
  nice -n 10 "$RETNET" train --data "$DATA" --out "$DIR/$name" --overwrite \
    --time-budget "$seconds" -t "$THREADS" --log-interval 20 --eval-interval 1000000 \
    --eval-tokens 16384 "$@" >"$DIR/$name.log" 2>&1
  echo "$DIR/$name: $(tail -n 1 "$DIR/$name/metrics.jsonl")"
}

# The targets: 4 sequences of 256 bytes a step (more steps in a short budget), a lower peak rate
# than the small model's.
TARGET_OPTS=(-b 4 --seq 256 --lr 0.0015 --warmup 30)
pids=()
train draft "${DRAFT_SECONDS:-300}" & pids+=($!)
train hybrid "${TARGET_SECONDS:-2100}" --config configs/spec-hybrid-41m.json "${TARGET_OPTS[@]}" &
pids+=($!)
train retnet "${TARGET_SECONDS:-2100}" --config configs/spec-retnet-44m.json "${TARGET_OPTS[@]}" &
pids+=($!)
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
