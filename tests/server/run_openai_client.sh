#!/usr/bin/env bash
# CTest driver of openai_client.mjs: installs the `openai` npm package into tests/server/node_modules
# when it is missing, then runs the test (skipped without node/npm unless CI=true: see
# tests/js/npm_driver.sh).
#   run_openai_client.sh RETNET_BINARY WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../js/npm_driver.sh"
require_npm_package "openai client test" "$here" "openai"
exec node "$here/openai_client.mjs" --retnet "$1" --workdir "$2"
