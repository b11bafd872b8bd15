#!/bin/bash
# Alternates step_loop binaries built against different libretnet.a, `reps` times each, and prints
# each one's median ms per step and its ratio to the first binary's. Usage:
#   dev/decode/ab.sh REPS STEPS BATCH BINARY...   e.g. dev/decode/ab.sh 8 300 16 /tmp/step_old /tmp/step_new
set -euo pipefail
reps=$1 steps=$2 batch=$3
shift 3
for _ in $(seq "$reps"); do
  for bin in "$@"; do
    echo "$bin $("$bin" "$steps" "$batch" | sed 's/.*median \([0-9.]*\).*/\1/')"
  done
done | /usr/bin/python3 -c "
import sys, statistics
runs = {}
for line in sys.stdin:
    name, ms = line.split()
    runs.setdefault(name, []).append(float(ms))
first = None
for name, v in runs.items():
    m = statistics.median(v)
    first = first or m
    print(f'batch $batch {name}: median {m:.4f} ms/step ({first / m:.2f}x the first) runs ' + ' '.join(f'{x:.3f}' for x in v))
"
