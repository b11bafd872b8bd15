# Sourced by the CTest drivers of the JavaScript tests (run_parity.sh, run_chat_template_parity.sh,
# tests/server/run_openai_client.sh):
#   require_npm_package LABEL DIR PACKAGE
# installs DIR's package.json into DIR/node_modules when PACKAGE is missing there. Without node or
# npm, or when the install fails, the test is skipped (exit 77), except under CI=true, where it
# fails.
unavailable() {
  echo "$1: $2" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "$1: skipped (set CI=true to make this a failure)" >&2
  exit 77
}

require_npm_package() {
  local label="$1" dir="$2" package="$3"
  command -v node >/dev/null ||
    unavailable "$label" "node is not installed (bash scripts/install-deps.sh test)"
  if [ ! -d "$dir/node_modules/$package" ]; then
    command -v npm >/dev/null ||
      unavailable "$label" "npm is not installed (bash scripts/install-deps.sh test)"
    npm install --prefix "$dir" --no-audit --no-fund >&2 ||
      unavailable "$label" "npm install --prefix $dir failed"
  fi
}
