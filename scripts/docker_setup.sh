#!/usr/bin/env bash
# Docker for the tiny-docker recipe and the real docker tests (tests/docker), idempotent:
#   1. Debian's docker.io, docker-registry and debootstrap, when missing (needs root);
#   2. dockerd, and the registry on 127.0.0.1:5000 (fixtures/docker/registry.yml, no auth),
#      when they are not running;
#   3. the vllm-cpu image, built and pushed by fixtures/docker/build_image.sh (cached: seconds
#      when the registry already has this build).
# Where a daemon cannot run (no root, no packages, dockerd does not come up), it writes the
# reason to fixtures/docker/build/UNAVAILABLE and exits 0: the docker tests then skip with
# that reason, printed in pytest's summary. A failing image build fails (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=fixtures/docker/build
REASON=$OUT/UNAVAILABLE
LOGS=/var/log
mkdir -p "$OUT"
rm -f "$REASON"

say() { echo "[docker] $*"; }
unavailable() {
  say "$*; the docker tests will be skipped"
  echo "$*" > "$REASON"
  exit 0
}

if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"
else SUDO="none"
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$SUDO" != none ] || unavailable "Debian's ${missing[*]} is not installed, and installing it needs root"
  say "installing Debian's ${missing[*]}"
  t0=$(date +%s)
  # scripts/apt_install.sh: one set-up's apt-get at a time (`make test` installs chromium beside this).
  scripts/apt_install.sh "${missing[@]}" > "$OUT/apt.log" 2>&1 \
    || unavailable "apt-get install ${missing[*]} failed (see $OUT/apt.log)"
  say "installed in $(( $(date +%s) - t0 )) s"
fi

if ! docker info >/dev/null 2>&1; then
  [ "$SUDO" != none ] || unavailable "no Docker daemon answers, and starting one needs root"
  say "starting dockerd (log: $LOGS/vllmqual-dockerd.log)"
  $SUDO sh -c "nohup dockerd > $LOGS/vllmqual-dockerd.log 2>&1 &"
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 \
    || unavailable "dockerd did not start: $(tail -1 $LOGS/vllmqual-dockerd.log 2>/dev/null || echo 'no log')"
fi

if ! curl -fs http://127.0.0.1:5000/v2/ >/dev/null 2>&1; then
  [ "$SUDO" != none ] || unavailable "the local registry on 127.0.0.1:5000 is not running, and starting it needs root"
  say "starting the registry on 127.0.0.1:5000 (log: $LOGS/vllmqual-registry.log)"
  $SUDO mkdir -p /var/lib/docker-registry
  $SUDO sh -c "nohup docker-registry serve $PWD/fixtures/docker/registry.yml > $LOGS/vllmqual-registry.log 2>&1 &"
  for _ in $(seq 60); do curl -fs http://127.0.0.1:5000/v2/ >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fs http://127.0.0.1:5000/v2/ >/dev/null 2>&1 \
    || unavailable "the registry did not start: $(tail -1 $LOGS/vllmqual-registry.log 2>/dev/null || echo 'no log')"
fi

fixtures/docker/build_image.sh
