#!/usr/bin/env bash
# Data parallel on one machine: 2 ranks x 1 thread against 1 rank x 2 threads, the default model,
# the same global batch (4 x 128 tokens), 10 steps, REPS repetitions; prints each run's last step
# line, tokens/s and (2 ranks) the all-reduce summary. 2 ranks run twice: with one all-reduce after
# the backward pass (--bucket-mib 0) and with buckets of BUCKET_MIB (default 1, as retnet) that overlap it,
# whose summary gives the exposed (not hidden) all-reduce time. Needs a build with MPI in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
R=./build/retnet
OUT=${OUT:-/tmp/retnet_bench_dp}
M="mpirun --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
[ "$(id -u)" -eq 0 ] && M="$M --allow-run-as-root"
COMMON="--data data/tinyshakespeare.txt --overwrite --steps 10 --seq 128 --eval-interval 1000 --eval-tokens 512 --log-interval 10"
for rep in $(seq 1 "${REPS:-2}"); do
  echo "== repetition $rep, load average $(cut -d' ' -f1 /proc/loadavg)"
  echo "-- 1 rank x 2 threads, batch 4"
  $R train $COMMON --out "$OUT/one" --batch 4 -t 2 2>&1 | grep -E "^step 10/|^trained"
  echo "-- 2 ranks x 1 thread, batch 2 each, one all-reduce after the backward pass"
  $M -np 2 $R train $COMMON --out "$OUT/two" --batch 2 -t 1 --bucket-mib 0 2>&1 | grep -E "^step 10/|^trained|^all-reduce"
  echo "-- 2 ranks x 1 thread, batch 2 each, buckets of ${BUCKET_MIB:-1} MiB overlapping the backward pass"
  $M -np 2 $R train $COMMON --out "$OUT/two" --batch 2 -t 1 --bucket-mib "${BUCKET_MIB:-1}" 2>&1 | grep -E "^step 10/|^trained|^all-reduce"
done
