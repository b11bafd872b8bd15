#!/usr/bin/env bash
# CTest driver of export_parity.mjs: installs @huggingface/tokenizers into tests/js/node_modules
# when it is missing, then checks `retnet export`'s tokenizer files with it (skipped without
# node/npm unless CI=true: see npm_driver.sh).
#   run_export_parity.sh RETNET_BINARY WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/npm_driver.sh"
require_npm_package "export parity" "$here" "@huggingface/tokenizers"
exec node "$here/export_parity.mjs" --retnet "$1" --workdir "$2"
