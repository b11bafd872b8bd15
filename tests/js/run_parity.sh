#!/usr/bin/env bash
# CTest driver of tokenizer_parity.mjs: installs @huggingface/tokenizers into tests/js/node_modules
# when it is missing (npm install --prefix tests/js), then runs the parity check (skipped without
# node/npm unless CI=true: see npm_driver.sh).
#   run_parity.sh RETNET_BINARY WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
retnet="$1"
workdir="$2"
source "$here/npm_driver.sh"
require_npm_package "tokenizer parity" "$here" "@huggingface/tokenizers"
exec node "$here/tokenizer_parity.mjs" --retnet "$retnet" \
  --data "$here/../../data/tinyshakespeare.txt" --workdir "$workdir"
