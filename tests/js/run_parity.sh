#!/usr/bin/env bash
# CTest driver of tokenizer_parity.mjs: installs @huggingface/tokenizers into tests/js/node_modules
# when it is missing (npm install --prefix tests/js), then runs the parity check.
#   run_parity.sh RETNET_BINARY WORKDIR
# Without node or npm, or when the install fails, the test is skipped (exit 77), except under
# CI=true, where it fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
retnet="$1"
workdir="$2"
unavailable() {
  echo "tokenizer parity: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "tokenizer parity: skipped (set CI=true to make this a failure)" >&2
  exit 77
}
command -v node >/dev/null || unavailable "node is not installed (bash scripts/install-deps.sh test)"
if [ ! -d "$here/node_modules/@huggingface/tokenizers" ]; then
  command -v npm >/dev/null || unavailable "npm is not installed (bash scripts/install-deps.sh test)"
  npm install --prefix "$here" --no-audit --no-fund >&2 ||
    unavailable "npm install --prefix $here failed"
fi
exec node "$here/tokenizer_parity.mjs" --retnet "$retnet" \
  --data "$here/../../data/tinyshakespeare.txt" --workdir "$workdir"
