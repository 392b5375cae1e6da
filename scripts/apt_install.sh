#!/usr/bin/env bash
# Install Debian packages for the project's set-up steps, one such step at a time.
#   scripts/apt_install.sh PACKAGE...
# `make test` installs chromium (scripts/browser_setup.sh) beside the docker set-up
# (scripts/docker_setup.sh): each takes the lock file APT_LOCK first, as apt refuses a second
# `apt-get update` at once ("Could not get lock /var/lib/apt/lists/lock") instead of waiting.
# NEEDRESTART_SUSPEND: docker.io recommends needrestart, whose scan of every running process after
# each install is of no use to a set-up. Needs root, or sudo without a password.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/apt_install.sh PACKAGE..." >&2; exit 2; }
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
APT_LOCK=${TMPDIR:-/tmp}/vllmqual-apt.lock
exec 9>"$APT_LOCK"
flock -w 900 9 || { echo "waited 900 s for another set-up's apt-get ($APT_LOCK)" >&2; exit 1; }
APT=(apt-get -qq -o DPkg::Lock::Timeout=600)
"${SUDO[@]}" "${APT[@]}" update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 "${APT[@]}" install -y "$@"
