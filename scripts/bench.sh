#!/usr/bin/env bash
# Runs the core benchmarks (GEMM, the retention heads sweep, whole-model forward) and
# prints markdown tables with ratios against the baseline measured in the same run; then the
# generation benchmark (`retnet bench decode`: latency by position, throughput by batch, prefill).
# Results (JSON, with machine context) go to $OUT_DIR (default: bench-results/).
set -euo pipefail
cd "$(dirname "$0")/.."
# The bench group: Google Benchmark for the programs, matplotlib for `retnet bench paper`'s plots.
DEPS=bench BUILD_TARGET= bash scripts/build.sh >/dev/null
# The Google Benchmark programs: build/apps/bench/micro/ (older trees: build/bench/).
MICRO=build/apps/bench/micro
[ -d "$MICRO" ] || MICRO=build/bench
OUT_DIR=${OUT_DIR:-bench-results}
mkdir -p "$OUT_DIR"
REPS=${REPS:-5}
for b in bench_gemm bench_model bench_retention; do
  echo "running $b ..." >&2
  "$MICRO/$b" --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT_DIR/$b.json" --benchmark_out_format=json >/dev/null
done
python3 scripts/bench_report.py "$OUT_DIR"/bench_gemm.json "$OUT_DIR"/bench_model.json \
  "$OUT_DIR"/bench_retention.json
echo "running retnet bench decode ..." >&2
./build/retnet bench decode --reps "$REPS" --json "$OUT_DIR/bench_decode.json"
