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
"$VENV/bin/pip" install --no-build-isolation --no-index .
echo "retnet installed into $VENV: $VENV/bin/python -c 'import retnet'"
