#!/usr/bin/env bash
# A step longer than one call of the device tool (10 minutes at most), such as the bracketed A/B
# at TP=2 (three cold starts of 90-160 s each plus the gates), runs in the background on the lent
# machine and later calls collect it. The machine is kept between calls made back to back, so:
#
#   call 1:  scripts/gpu/in_background.sh start /tmp/ab scripts/gpu/run_gpu_campaign.sh /tmp/ab/out ab
#   call 2+: scripts/gpu/in_background.sh wait /tmp/ab 560 "$OUT"
#
#   start DIR CMD [ARG ...]     CMD in a session of its own (setsid), so the end of the call that
#                               started it does not stop it; its output goes to DIR/log
#   wait DIR SECONDS [COPY_TO]  print the log as it grows until CMD ends or SECONDS pass, then pack
#                               DIR into COPY_TO/in_background.tar.gz (COPY_TO: the call's $OUT),
#                               so a machine given back loses nothing already written. Exits with
#                               CMD's status once it has ended, 75 while it is still running (call
#                               wait again).
#
# One archive, because the device tool brings back at most 8 files, at most two folders below
# $OUT; the A/B alone writes 8 reports and its junit. The archive leaves out every folder named
# private: the raw server logs stay on the machine (they are not sanitized).
set -uo pipefail
usage() { sed -n '9,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
action=${1:-}; dir=${2:-}
[ -n "$action" ] && [ -n "$dir" ] || usage
shift 2

running() { [ -f "$dir/pid" ] && [ ! -f "$dir/rc" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

start() {
  [ $# -gt 0 ] || usage
  if running; then echo "in_background: $dir already runs process $(cat "$dir/pid"); wait for it first" >&2; exit 2; fi
  mkdir -p "$dir" && rm -f "$dir/rc" "$dir/shown" "$dir/log" || exit 2
  date +%s > "$dir/started"
  # Every descriptor redirected: the device tool's call ends only when nothing holds its output.
  setsid bash -c 'cmd_dir=$1; shift; "$@"; echo $? > "$cmd_dir/rc.part"; mv "$cmd_dir/rc.part" "$cmd_dir/rc"' \
    in_background "$dir" "$@" < /dev/null > "$dir/log" 2>&1 &
  local pid=$! tries=0
  echo "$pid" > "$dir/pid"
  # Return once the step leads its own session, so that nothing after this call can still reach it.
  while [ "$(ps -o sid= -p "$pid" | tr -d ' ')" != "$pid" ] && [ $tries -lt 50 ] && kill -0 "$pid" 2>/dev/null; do
    sleep 0.1; tries=$((tries + 1))
  done
  echo "in_background: started process $pid in its own session; log $dir/log"
}

show_new_lines() {
  local shown size; shown=$(cat "$dir/shown" 2>/dev/null || echo 0)
  [ -f "$dir/log" ] || return 0
  # The size first, then exactly those bytes: a line written between printing and measuring would
  # otherwise count as shown without having been printed.
  size=$(stat -c %s "$dir/log")
  [ "$size" -gt "$shown" ] || return 0
  tail -c +"$((shown + 1))" "$dir/log" | head -c "$((size - shown))"
  echo "$size" > "$dir/shown"
}

collect() {
  local copy_to=${1:-}
  [ -n "$copy_to" ] || return 0
  mkdir -p "$copy_to" && tar -C "$dir" --exclude=private -czf "$copy_to/in_background.tar.gz" . ||
    echo "in_background: could not pack $dir into $copy_to/in_background.tar.gz" >&2
}

wait_for() {
  local seconds=${1:-}; local copy_to=${2:-}
  [[ "$seconds" =~ ^[0-9]+$ ]] || usage
  [ -f "$dir/pid" ] || { echo "in_background: nothing was started in $dir" >&2; exit 2; }
  local begin now last_note started; begin=$(date +%s); last_note=$begin; started=$(cat "$dir/started")
  while running; do
    show_new_lines
    now=$(date +%s)
    if [ $((now - begin)) -ge "$seconds" ]; then
      echo "=== in_background: still running after $((now - started)) s; call wait again"
      collect "$copy_to"; exit 75
    fi
    if [ $((now - last_note)) -ge 60 ]; then
      echo "=== in_background: running for $((now - started)) s"; last_note=$now
    fi
    sleep 1
  done
  show_new_lines
  if [ ! -f "$dir/rc" ]; then
    echo "=== in_background: process $(cat "$dir/pid") is gone without an exit status (killed?)"
    collect "$copy_to"; exit 70
  fi
  local rc; rc=$(cat "$dir/rc")
  echo "=== in_background: ended with exit $rc after $(( $(stat -c %Y "$dir/rc") - started )) s"
  collect "$copy_to"; exit "$rc"
}

case $action in
  start) start "$@" ;;
  wait)  wait_for "$@" ;;
  *)     usage ;;
esac
