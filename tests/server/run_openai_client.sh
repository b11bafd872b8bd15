#!/usr/bin/env bash
# CTest driver of openai_client.mjs: installs the `openai` npm package into tests/server/node_modules
# when it is missing (npm install --prefix tests/server), then runs the test.
#   run_openai_client.sh RETNET_BINARY WORKDIR
# Without node or npm, or when the install fails, the test is skipped (exit 77), except under
# CI=true, where it fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
unavailable() {
  echo "openai client test: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "openai client test: skipped (set CI=true to make this a failure)" >&2
  exit 77
}
command -v node >/dev/null || unavailable "node is not installed (bash scripts/install-deps.sh test)"
if [ ! -d "$here/node_modules/openai" ]; then
  command -v npm >/dev/null || unavailable "npm is not installed (bash scripts/install-deps.sh test)"
  npm install --prefix "$here" --no-audit --no-fund >&2 ||
    unavailable "npm install --prefix $here failed"
fi
exec node "$here/openai_client.mjs" --retnet "$1" --workdir "$2"
