#!/usr/bin/env bash
# Builds and runs the whole test suite: the optimised build with every test (C++ unit and slow
# tests, the PyTorch reference checks, the Python package, the server, MPI and the Node.js
# clients), the C++ unit tests again on the AVX2 and scalar kernels, then one clang build under
# AddressSanitizer and UndefinedBehaviorSanitizer for the unit tests and the fuzz tests (libFuzzer
# over every parser). Installs dependencies first if missing.
#
# It tests what it says: a test may be skipped only for hardware this machine lacks (a CPU
# feature, a kernel facility); a skip for a missing component (MPI, node, a Python package) fails
# the run, and the closing summary lists every skipped test.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
# ctest runs $JOBS tests at once and each uses every core: OpenMP's default barrier spins, and
# with more threads than cores a spinning thread holds the core its partner needs (a 45k-parameter
# training step took 1.3 s instead of 0.05 s under load). Waiting threads sleep instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
# stage TITLE: prints the stage's title and how long the one before took.
STAGE_START=$SECONDS
stage() {
  [ "$STAGE_START" -lt "$SECONDS" ] && echo "   (took $((SECONDS - STAGE_START)) s; $SECONDS s in all)"
  STAGE_START=$SECONDS
  echo "== $1"
}
# run_ctest NAME ARGS...: ctest with its output kept for the summary.
run_ctest() {
  local name=$1
  shift
  ctest "$@" 2>&1 | tee "$LOGS/$name.log"
  return "${PIPESTATUS[0]}"
}

stage "release build and all tests"
DEPS="test bench" BUILD_DIR=build bash scripts/build.sh
run_ctest release --test-dir build --output-on-failure --parallel "$JOBS" --timeout 900 -LE fuzz

# The kernels are chosen at run time from the CPU; capping the choice runs the C++ unit tests
# that compute with them (GEMM, decode kernels, every mixer and form, training) again through the
# paths older CPUs take. Suites whose work does not depend on the ISA (text, parsers, files, the
# server's units, command-line errors, benchmark reports; CpuIsaCap caps itself) run once. On a
# CPU without AVX-512 the avx2 pass would repeat the first, so it is left out there.
ISA_INDEPENDENT='^(Base64|BadInput|Batches|Bench|ByteTokenizer|ChatTemplate|Cli\.|Communicator|'\
'Config\.|CpuIsaCap|Data\.|FileSafety|GenerateCli|HugePages|HybridConfig|JsonParse|MixerConfig|'\
'Npy|ProcessMemory|QuantCli|SentencePiece|Server|TestHelpers|TextLimits|TextReleaser|Tokenizer|library_consumer)'
ISA_CAPS="scalar"
grep -qw avx512f /proc/cpuinfo && ISA_CAPS="avx2 scalar"
for isa in $ISA_CAPS; do
  stage "C++ unit tests with RETNET_MAX_ISA=$isa"
  RETNET_MAX_ISA=$isa run_ctest "isa-$isa" --test-dir build --output-on-failure --parallel "$JOBS" \
    -L unit -LE "python|mpi|js|server|fuzz" -E "$ISA_INDEPENDENT" --timeout 900
done

# One clang build with AddressSanitizer and UndefinedBehaviorSanitizer serves the unit tests and
# the libFuzzer harnesses (tests/fuzz): one instrumented build instead of two. clang's UBSan also
# checks float-to-integer conversions, which GCC's leaves out.
SANITIZERS=1
FUZZ=1
[ "${RETNET_SKIP_SANITIZERS:-0}" = "1" ] && SANITIZERS=0
[ "${RETNET_SKIP_FUZZ:-0}" = "1" ] && FUZZ=0
if [ "$SANITIZERS" = 1 ] || [ "$FUZZ" = 1 ]; then
  stage "ASan + UBSan build (clang)"
  SANITIZE_ARGS=(-DCMAKE_CXX_COMPILER=clang++ -DRETNET_SANITIZE=ON -DRETNET_FUZZ=ON
                 -DRETNET_BUILD_BENCHMARKS=OFF)
  [ "$SANITIZERS" = 0 ] && SANITIZE_ARGS+=(-DRETNET_BUILD_TESTS=OFF -DRETNET_MPI=OFF)
  DEPS=test BUILD_DIR=build-sanitize BUILD_TYPE=RelWithDebInfo bash scripts/build.sh \
    "${SANITIZE_ARGS[@]}"
fi

if [ "$SANITIZERS" = 1 ]; then
  stage "unit tests under ASan + UBSan"
  # OpenBLAS and the OpenMP runtime are not instrumented; leak checks would report their one-time
  # buffers. The mpirun tests run in the release pass only: OpenMPI is not instrumented either,
  # and the trainer they drive is the one the unit tests check here. So do the Node.js tests (the
  # npm clients, Chromium, the JS template reference): they check protocols and text, and the
  # server they talk to runs instrumented in the server tests. Instrumented code runs several
  # times slower: the per-test limit is doubled. Two tests repeat code the others cover
  # thousands of times (a chi-square over many seeds, every paper figure's benchmark): about a
  # minute each when instrumented, for no new paths; they run in the release pass.
  ASAN_OPTIONS=detect_leaks=0 run_ctest asan --test-dir build-sanitize --output-on-failure \
    --parallel "$JOBS" -L unit -LE "python|mpi|js|fuzz" --timeout 1800 \
    -E '^(SpeculativeSampling\.FirstTokensAreDistributedAsPlainSampling|BenchPaper\.SmokeWritesEveryFigure)$'
fi

if [ "$FUZZ" = 1 ]; then
  # Every parser and loader that takes outside input, fuzzed (clang's libFuzzer): each harness
  # replays its seeds and past findings, then fuzzes briefly. The long run is scripts/fuzz.sh
  # (docs/fuzzing.md).
  stage "fuzz tests (libFuzzer)"
  run_ctest fuzz --test-dir build-sanitize --output-on-failure --parallel "$JOBS" -L fuzz \
    --timeout 900
fi

# Skipped tests: ctest lists them as "NN - name (Skipped)".
stage "skipped tests"
skipped=$(grep -h "(Skipped)" "$LOGS"/*.log | sed 's/^[[:space:]]*[0-9]* - //; s/ (Skipped)//' |
  sort | uniq -c || true)
if [ -z "$skipped" ]; then
  echo "none"
else
  echo "$skipped" | sed 's/^ *\([0-9]*\) /  (in \1 passes) /'
  # Components the test groups install must be there: their tests may not skip.
  if echo "$skipped" | grep -Eq " (mpi_|js_|python_|server_)"; then
    echo "test.sh: tests of an installed component were skipped (above); failing" >&2
    exit 1
  fi
fi
echo "== all tests passed in $SECONDS s"
