#!/usr/bin/env bash
# Installs the Debian packages a job needs. Idempotent: packages already present are skipped.
# Runs as root, or through sudo when available.
#
#   bash scripts/install-deps.sh              # runtime: build and run the engine (the main job)
#   bash scripts/install-deps.sh test         # + GoogleTest, Google Benchmark, the PyTorch reference,
#                                             #   pybind11 and pytest (the Python package),
#                                             #   node and npm (the tokenizer.json parity test),
#                                             #   chromium (the server's chat page test),
#                                             #   clang and libFuzzer (the fuzz tests)
#   bash scripts/install-deps.sh bench        # + Google Benchmark, matplotlib (plots)
#   bash scripts/install-deps.sh python       # + pybind11, venv, pip (the Python package)
#   bash scripts/install-deps.sh mpi          # + OpenMPI (multi-process training; in test too)
#   bash scripts/install-deps.sh test bench   # several groups at once
#
# Every group includes runtime. Groups can also be given as one string ("test bench").
set -euo pipefail

RUNTIME=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas0-openmp libomp-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libsentencepiece-dev libcpp-httplib-dev libicu-dev
)
# The Python package (python/): headers, pybind11, and what an offline pip install into a venv uses.
PYTHON=(python3 python3-dev python3-numpy pybind11-dev python3-pybind11 python3-venv python3-pip
        python3-setuptools python3-wheel)
# Multi-process training (`mpirun -np N retnet train`): CMake turns RETNET_MPI on when it finds it.
MPI=(openmpi-bin libopenmpi-dev)
TEST=(libgtest-dev libgmock-dev libbenchmark-dev python3 python3-numpy python3-torch nodejs npm
      chromium "${PYTHON[@]}" python3-pytest "${MPI[@]}" clang libfuzzer-14-dev)
BENCH=(libbenchmark-dev python3-matplotlib)

groups=()
for arg in "$@"; do
  for g in $arg; do groups+=("$g"); done   # "test bench" as one argument works too
done
[ ${#groups[@]} -eq 0 ] && groups=(runtime)

PACKAGES=("${RUNTIME[@]}")
for g in "${groups[@]}"; do
  case "$g" in
    runtime) ;;
    test) PACKAGES+=("${TEST[@]}") ;;
    python) PACKAGES+=("${PYTHON[@]}") ;;
    mpi) PACKAGES+=("${MPI[@]}") ;;
    bench) PACKAGES+=("${BENCH[@]}") ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown group '$g' (expected: runtime, test, bench, python, mpi)" >&2; exit 2 ;;
  esac
done
# Drop duplicates (libbenchmark-dev is in two groups), keeping the order.
mapfile -t PACKAGES < <(printf '%s\n' "${PACKAGES[@]}" | awk '!seen[$0]++')

missing=()
for p in "${PACKAGES[@]}"; do
  # node and npm from another source (NodeSource's nodejs bundles npm) count as present.
  case "$p" in nodejs) command -v node >/dev/null && continue ;; npm) command -v npm >/dev/null && continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present (${groups[*]})"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]} (${groups[*]})"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
