#!/usr/bin/env bash
# Run one step of `make test` beside the steps after it, and wait for it where its result is needed.
# The docker image (minutes on a fresh machine: Debian's packages, a base rootfs, a 2.6 GB venv
# layer committed and pushed) is needed only by the docker tests, so it is built while lint,
# the type check, the model and the first round of tests run; the docker tests wait for it. Not
# beside the fleet round: on a fresh machine (2 cores) the build slowed its Ray boots past the
# recipe's 240 s cold-start limit.
#
#   scripts/beside.sh start NAME COMMAND [ARG...]   COMMAND in the background (same process group:
#                                                   Ctrl-C and CI's time budget reach it); its output
#                                                   goes to build/beside/NAME.log
#   scripts/beside.sh wait NAME                     wait for it, print its output, exit with its status;
#                                                   exit 0 at once when no NAME was started
#   scripts/beside.sh running NAME                  exit 0 while it runs, 1 otherwise (the tests' scheduler
#                                                   starts other tests first while their step runs)
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=build/beside
usage() { sed -n '9,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
action=${1:-}; name=${2:-}
[ -n "$action" ] && [ -n "$name" ] || usage
shift 2

case $action in
  start)
    [ $# -gt 0 ] || usage
    mkdir -p "$DIR" && rm -f "$DIR/$name.rc" "$DIR/$name.log"
    ( "$@"; echo $? > "$DIR/$name.rc.part"; mv "$DIR/$name.rc.part" "$DIR/$name.rc" ) < /dev/null > "$DIR/$name.log" 2>&1 &
    echo $! > "$DIR/$name.pid"
    echo "[beside] $name started in the background (log: $DIR/$name.log)" ;;
  wait)
    [ -f "$DIR/$name.pid" ] || exit 0
    pid=$(cat "$DIR/$name.pid")
    SECONDS=0
    while [ ! -f "$DIR/$name.rc" ] && kill -0 "$pid" 2>/dev/null; do sleep 1; done
    rm -f "$DIR/$name.pid"
    echo "[beside] $name ended (waited $SECONDS s for it); its output:"
    cat "$DIR/$name.log" 2>/dev/null
    code=$(cat "$DIR/$name.rc" 2>/dev/null || echo 1)
    [ "$code" -eq 0 ] || echo "[beside] $name failed with exit code $code"
    exit "$code" ;;
  running)
    [ -f "$DIR/$name.pid" ] && [ ! -f "$DIR/$name.rc" ] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null ;;
  *) usage ;;
esac
