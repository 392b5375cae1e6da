#!/usr/bin/env bash
# Debian's chromium for the headless HTML report tests (tests/integration/test_html_*.py), when
# missing (needs root or sudo). `make test` runs it beside the steps after set-up
# (scripts/beside.sh start browser ...): on a fresh machine the install takes about a minute that
# nothing else has to wait for, and the tests that open the page wait for it.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && { echo "[browser] chromium is installed"; exit 0; }
echo "[browser] installing Debian's chromium for the headless HTML test"
"$(dirname "$0")/apt_install.sh" chromium >/dev/null
echo "[browser] chromium installed"
