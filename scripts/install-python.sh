#!/usr/bin/env bash
# Installs the Python package `retnet` into a virtual environment (default: .venv at the top of the
# repository) with Debian's Python, offline: the venv sees the system's numpy and torch, and pip
# builds the extension with the engine's CMake project (no PyPI, no build isolation).
#
#   bash scripts/install-python.sh            # -> .venv; then: .venv/bin/python -c "import retnet"
#   VENV=/opt/retnet bash scripts/install-python.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh python
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
# The engine's release build in build/ (scripts/main.sh's, scripts/build.sh's), when there is one,
# builds the module too: pip then compiles only the module instead of the engine a second time.
cache=build/CMakeCache.txt
if [ -z "${RETNET_CMAKE_BUILD_DIR:-}" ] && [ -f "$cache" ] &&
  grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$PWD" "$cache" &&
  grep -qx "CMAKE_BUILD_TYPE:STRING=Release" "$cache" &&
  ! grep -qx "RETNET_SANITIZE:BOOL=ON" "$cache"; then
  echo "install-python: building the module in build/ (the engine is compiled there already)"
  cmake build -DRETNET_BUILD_PYTHON=ON >/dev/null
  export RETNET_CMAKE_BUILD_DIR=$PWD/build
fi
"$VENV/bin/pip" install --no-build-isolation --no-index .
echo "retnet installed into $VENV: $VENV/bin/python -c 'import retnet'"
