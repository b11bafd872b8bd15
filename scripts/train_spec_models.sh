#!/usr/bin/env bash
# The models of speculative decoding's benefit benchmark (`retnet bench speculative --benefit`),
# trained on the bundled Tiny Shakespeare with the byte tokenizer, each only if its model file is
# missing (so a second run reuses them):
#   $DIR/draft   the default-size model (3.8 M parameters), the draft;
#   $DIR/hybrid  configs/spec-hybrid-41m.json: retention with attention every fourth layer;
#   $DIR/retnet  configs/spec-retnet-44m.json: the pure RetNet of nearly the same size.
# The targets train in two phases: first on the corpus ($DIR/NAME-base), then on a copy-practice
# corpus made from its training part by scripts/make_copy_corpus.py (each second passage followed
# by a repeat with small changes, 768-byte sequences), so that they learn to copy from context as
# large models do. DIR (default runs/spec), RETNET (default build/retnet), DRAFT_SECONDS (default
# 300), TARGET_SECONDS (default 2100) and COPY_SECONDS (default 2100) set where, with what and for
# how long. The two targets train side by side on one thread each (THREADS per run, default 1);
# the draft trains beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DIR:-runs/spec}
RETNET=${RETNET:-build/retnet}
DATA=data/tinyshakespeare.txt
THREADS=${THREADS:-1}
mkdir -p "$DIR"

train() {  # name, data, seconds, extra options...
  local name=$1 data=$2 seconds=$3
  shift 3
  if [ -f "$DIR/$name/model.safetensors" ]; then
    echo "$DIR/$name/model.safetensors exists: reused"
    return
  fi
  nice -n 10 "$RETNET" train --data "$data" --out "$DIR/$name" --overwrite \
    --time-budget "$seconds" -t "$THREADS" --log-interval 20 --eval-interval 1000000 \
    --eval-tokens 16384 "$@" >"$DIR/$name.log" 2>&1
  echo "$DIR/$name: $(tail -n 1 "$DIR/$name/metrics.jsonl")"
}

# A target: 4 sequences of 256 bytes a step on the corpus (more steps in a short budget, a lower
# peak rate than the small model's), then 2 of 768 on the copy-practice corpus from there.
target() {  # name, config
  local name=$1 config=$2
  [ -f "$DIR/$name/model.safetensors" ] && { echo "$DIR/$name/model.safetensors exists: reused"; return; }
  train "$name-base" "$DATA" "${TARGET_SECONDS:-2100}" --config "$config" -b 4 --seq 256 \
    --lr 0.0015 --warmup 30
  train "$name" "$DIR/copy-practice.txt" "${COPY_SECONDS:-2100}" \
    --init-from "$DIR/$name-base/model.safetensors" -b 2 --seq 768 --lr 0.001 --warmup 20
}

[ -f "$DIR/copy-practice.txt" ] ||
  python3 scripts/make_copy_corpus.py --data "$DATA" --out "$DIR/copy-practice.txt"
pids=()
train draft "$DATA" "${DRAFT_SECONDS:-300}" & pids+=($!)
target hybrid configs/spec-hybrid-41m.json & pids+=($!)
target retnet configs/spec-retnet-44m.json & pids+=($!)
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
