#!/usr/bin/env bash
# CTest driver of chat_template_parity.mjs: installs tests/js's packages (@huggingface/jinja among
# them) when @huggingface/jinja is missing, then runs the parity check (skipped without node/npm
# unless CI=true: see npm_driver.sh).
#   run_chat_template_parity.sh RETNET_BINARY WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/npm_driver.sh"
require_npm_package "chat template parity" "$here" "@huggingface/jinja"
exec node "$here/chat_template_parity.mjs" --retnet "$1" --workdir "$2"
