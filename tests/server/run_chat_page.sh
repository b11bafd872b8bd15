#!/usr/bin/env bash
# CTest driver of chat_page.mjs: installs playwright-core into tests/server/node_modules when it is
# missing, then drives the chat page in Debian's Chromium (skipped without node/npm or chromium
# unless CI=true: see tests/js/npm_driver.sh).
#   run_chat_page.sh RETNET_BINARY WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../js/npm_driver.sh"
chromium="${RETNET_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || unavailable "chat page test" "$chromium is missing (bash scripts/install-deps.sh test)"
require_npm_package "chat page test" "$here" "playwright-core"
exec node "$here/chat_page.mjs" --retnet "$1" --workdir "$2" --chromium "$chromium"
