#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan, into build-fuzz/) and fuzzes each for a
# while; the long run behind docs/fuzzing.md. The test command runs the same harnesses briefly
# (the "fuzz" CTest label).
#
#   bash scripts/fuzz.sh                      # every harness, 10 minutes each
#   bash scripts/fuzz.sh --seconds 60 tokenizer chat_template
#   bash scripts/fuzz.sh --write-seeds        # remake the engine-written seeds in tests/fuzz/corpus
#
# What a run finds lands in build-fuzz/tests/fuzz/artifacts/NAME/ (crash-*, timeout-*, oom-*);
# new coverage in build-fuzz/tests/fuzz/found/NAME/. To keep a finding as a regression test,
# minimise it (build-fuzz/tests/fuzz/fuzz_NAME -minimize_crash=1 -runs=10000 FILE), copy it into
# tests/fuzz/regressions/NAME/, fix the code, and the fuzz test replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=600
WRITE_SEEDS=0
NAMES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --write-seeds) WRITE_SEEDS=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) NAMES+=("$1"); shift ;;
  esac
done
bash scripts/install-deps.sh test >/dev/null
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B build-fuzz "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DRETNET_FUZZ=ON -DRETNET_BUILD_TESTS=OFF -DRETNET_BUILD_BENCHMARKS=OFF -DRETNET_BUILD_PYTHON=OFF \
  -DRETNET_MPI=OFF >/dev/null
cmake --build build-fuzz --parallel "$(nproc)" --target retnet_fuzzers
ALL=$(sed -n '/^set(RETNET_FUZZERS/,/)/p' tests/fuzz/CMakeLists.txt |
  sed 's/set(RETNET_FUZZERS//; s/).*//' | tr ' ' '\n' | grep -v '^$')
[ ${#NAMES[@]} -eq 0 ] && mapfile -t NAMES <<<"$ALL"
OUT=build-fuzz/tests/fuzz
if [ "$WRITE_SEEDS" = 1 ]; then
  for n in model_file hf_directory state_file checkpoint; do
    RETNET_FUZZ_WRITE_SEEDS=$PWD/tests/fuzz/corpus/$n "$OUT/fuzz_$n" -runs=0 -close_fd_mask=1
  done
  exit 0
fi
printf '%-16s %8s %12s %s\n' harness seconds executions findings
status=0
for n in "${NAMES[@]}"; do
  echo "$ALL" | grep -qx "$n" || { echo "fuzz.sh: no harness '$n' (have: $(echo $ALL))" >&2; exit 2; }
  mkdir -p "$OUT/found/$n" "$OUT/artifacts/$n"
  dirs=("$OUT/found/$n" "tests/fuzz/corpus/$n")
  [ -d "tests/fuzz/regressions/$n" ] && dirs+=("tests/fuzz/regressions/$n")
  log="$OUT/artifacts/$n/run.log"
  # -fork keeps going past a finding, so one run reports every kind it meets.
  "$OUT/fuzz_$n" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_EACH" -timeout=60 -rss_limit_mb=2048 -max_len=262144 \
    -close_fd_mask=1 -artifact_prefix="$OUT/artifacts/$n/" "${dirs[@]}" >"$log" 2>&1 || true
  # fork mode's progress lines start "#EXECUTIONS: cov: ...".
  execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  found=$(find "$OUT/artifacts/$n" -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
            -o -name 'leak-*' | wc -l)
  printf '%-16s %8s %12s %s\n' "$n" "$SECONDS_EACH" "${execs:-0}" "$found"
  [ "$found" -eq 0 ] || status=1
done
exit $status
