#!/usr/bin/env bash
# Debian's chromium for the headless HTML report tests (tests/integration/test_html_*.py), when
# missing (needs root or sudo). `make test` runs it beside the steps after set-up
# (scripts/beside.sh start browser ...): on a fresh machine the install takes about a minute that
# nothing else has to wait for, and the tests that open the page wait for it.
# apt waits for the package lock (DPkg::Lock::Timeout) rather than failing: the docker set-up,
# which also runs beside the tests, installs its own Debian packages at the same time.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && { echo "[browser] chromium is installed"; exit 0; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "[browser] installing Debian's chromium for the headless HTML test"
APT=(apt-get -qq -o DPkg::Lock::Timeout=600)
$SUDO "${APT[@]}" update
$SUDO env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 "${APT[@]}" install -y chromium >/dev/null
echo "[browser] chromium installed"
