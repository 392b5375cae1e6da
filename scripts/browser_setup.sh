#!/usr/bin/env bash
# Debian's chromium for the headless HTML report tests (tests/integration/test_html_*.py), when
# missing (needs root or sudo). `make test` runs it beside the steps after set-up
# (scripts/beside.sh start browser ...): on a fresh machine the install takes about a minute that
# nothing else has to wait for, and the tests that open the page wait for it.
# The docker set-up, also run beside the tests, installs its own Debian packages: both take the
# lock file APT_LOCK first (apt itself refuses a second `apt-get update` at once instead of waiting).
set -euo pipefail
command -v chromium >/dev/null 2>&1 && { echo "[browser] chromium is installed"; exit 0; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
APT_LOCK=${TMPDIR:-/tmp}/vllmqual-apt.lock
exec 9>"$APT_LOCK"
flock -w 900 9 || { echo "[browser] waited 900 s for $APT_LOCK"; exit 1; }
command -v chromium >/dev/null 2>&1 && { echo "[browser] chromium is installed"; exit 0; }
echo "[browser] installing Debian's chromium for the headless HTML test"
APT=(apt-get -qq -o DPkg::Lock::Timeout=600)
$SUDO "${APT[@]}" update
$SUDO env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 "${APT[@]}" install -y chromium >/dev/null
echo "[browser] chromium installed"
