#!/usr/bin/env bash
# CTest driver of chat_template_parity.mjs: installs tests/js's packages (@huggingface/jinja among
# them) into tests/js/node_modules when @huggingface/jinja is missing, then runs the parity check.
#   run_chat_template_parity.sh RETNET_BINARY WORKDIR
# Without node or npm, or when the install fails, the test is skipped (exit 77), except under
# CI=true, where it fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
retnet="$1"
workdir="$2"
unavailable() {
  echo "chat template parity: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "chat template parity: skipped (set CI=true to make this a failure)" >&2
  exit 77
}
command -v node >/dev/null || unavailable "node is not installed (bash scripts/install-deps.sh test)"
if [ ! -d "$here/node_modules/@huggingface/jinja" ]; then
  command -v npm >/dev/null || unavailable "npm is not installed (bash scripts/install-deps.sh test)"
  npm install --prefix "$here" --no-audit --no-fund >&2 ||
    unavailable "npm install --prefix $here failed"
fi
exec node "$here/chat_template_parity.mjs" --retnet "$retnet" --workdir "$workdir"
