#!/usr/bin/env bash
# Sequence parallel on one machine: one batch of 1 sequence of T tokens per step, the default model,
# chunkwise form; 2 ranks x 1 thread (each rank half of the sequence) against 1 rank x 2 threads
# (the whole sequence). Prints each run's peak RSS per rank (/usr/bin/time's maximum resident set)
# and its last step line (tokens/s of that step). T from TS (default 8192 16384 32768), STEPS steps
# (default 3); CONFIG: a model config JSON instead of the default model. Needs a build with MPI
# in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
R=./build/retnet
OUT=${OUT:-/tmp/retnet_bench_sp}
M="mpirun --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
[ "$(id -u)" -eq 0 ] && M="$M --allow-run-as-root"
STEPS=${STEPS:-3}
for T in ${TS:-8192 16384 32768}; do
  COMMON="--data data/tinyshakespeare.txt --overwrite --steps $STEPS --batch 1 --seq $T --form chunkwise --eval-interval 1000 --eval-tokens $T --log-interval 1 --checkpoint-interval 1000${CONFIG:+ --config $CONFIG}"
  echo "== T = $T, load average $(cut -d' ' -f1 /proc/loadavg)"
  echo "-- 1 rank x 2 threads"
  /usr/bin/time -f "peak RSS %M KB" $R train $COMMON --out "$OUT/one" -t 2 2>&1 |
    grep -E "^step $STEPS/|^peak RSS"
  echo "-- 2 ranks x 1 thread, --seq-parallel"
  $M -np 2 /usr/bin/time -f "peak RSS %M KB" $R train $COMMON --seq-parallel --out "$OUT/two" -t 1 2>&1 |
    grep -E "^step $STEPS/|^peak RSS"
done
