#!/usr/bin/env bash
# The project's own tests as `make test` runs them:
#   round 1: the tests that boot real servers and containers, two at a time (pytest-xdist; tests that
#     share a server, a managed run or a Ray cluster stay in one worker, see tests/support/xdist_groups.py).
#     A real server's boot leaves one core idle for about half of it, which the second worker fills.
#     Beside them, in a session of their own at normal priority, round 1's tests that boot neither
#     (`--lane light`, tests/support/lanes.py: the fault server, failing launch commands, bad recipes,
#     the headless browser), which mostly wait and would otherwise hold a worker's queue back.
#     Beside both, in a session of their own at a lower CPU priority (nice), the quick tiers (unit,
#     plugin, benchmarks; no server of their own): they take the CPU the servers leave idle (their
#     boots' imports, the tests that wait on a timeout) and yield it whenever a server's process
#     wants it, so the servers' tests keep their pace. At the same priority, they slowed the first
#     round by 140 s. Their tests marked wall_clock (an upper bound on seconds, which a starved
#     process can miss) are left to round 2.
#   round 2: the Ray fleet tests, alone (beside a second real server, a local Ray cluster missed its
#     start-up deadlines), with the wall_clock tests beside them at normal priority. The quick
#     tiers, if still running, go on beside them.
# Every part runs even when tests of another fail; an interrupted first round (Ctrl-C, SIGTERM:
# pytest's exit status 2) ends the run. The exit status is the first round's failure (either
# lane), else the quick tiers', else the wall_clock tests', else the fleet round's. The project's
# tests are not a qualification run:
# `-p no:vllmqual` keeps the plugin inert in the outer pytest (pyproject.toml's vllmqual_recipe
# would otherwise make the xdist controller boot a tiny-cpu server that no test uses); the
# sessions the tests start load it.
#   scripts/run_tests.sh [PYTEST ARGS...]
#   VLLMQUAL_QUICK_NICE (default 10): the quick tiers' niceness.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}

# The kernel's autogroup scheduling puts each session in a group of its own, and every server runs
# in a session of its own. vLLM's TP workers spin (sched_yield) for a second after each engine step,
# and a spinning group keeps its cores from every other group: measured on this 2-core machine
# (docs/PERFORMANCE.md), a second tiny-cpu server booting beside one under sequential requests made no
# progress in 9 minutes with autogroup on, and was ready in 53 s with it off. So the tests run with it
# off where this user may switch it (root; VLLMQUAL_KEEP_AUTOGROUP=1 leaves it alone), and it is
# switched back on when they end.
AUTOGROUP=${VLLMQUAL_AUTOGROUP_FILE:-/proc/sys/kernel/sched_autogroup_enabled}
restore_autogroup() { :; }
if [ -z "${VLLMQUAL_KEEP_AUTOGROUP:-}" ] && [ "$(cat "$AUTOGROUP" 2>/dev/null)" = 1 ] \
    && { echo 0 > "$AUTOGROUP"; } 2>/dev/null; then
  echo "[tests] kernel autogroup scheduling off while the tests run (a spinning vLLM server would starve the other sessions)"
  restore_autogroup() { echo 1 > "$AUTOGROUP"; echo "[tests] kernel autogroup scheduling back on"; }
fi
trap restore_autogroup EXIT
QUICK=(tests/unit tests/plugin tests/benchmarks)
FLEET_BENCH=tests/benchmarks/test_bench_fleet_quick.py
# tests/support/xdist_groups.py FLEET_ELSEWHERE: a file outside tests/fleet that starts a Ray cluster.
# The tiny-cpu fleet goes first in the fleet round, its own five-node cluster stopped when it ends,
# then that file and the fleet's Ray-side and fault tests: run last, the tiny-cpu fleet's five to
# seven minutes had the Ray-side tests' shared cluster (tests/fleet/conftest.py), idle but polling,
# beside them. The files are named one by one: pytest keeps the order of its arguments, but a file
# also inside a folder argument is collected once, in the folder's order.
FLEET_FIRST=tests/fleet/test_fleet_tiny_cpu.py
FLEET=("$FLEET_FIRST" "$FLEET_BENCH")
shopt -s nullglob
for file in tests/fleet/test_*.py; do [ "$file" = "$FLEET_FIRST" ] || FLEET+=("$file"); done
shopt -u nullglob
ignore=()
for folder in "${QUICK[@]}" "$FLEET_BENCH" tests/fleet; do ignore+=("--ignore=$folder"); done
QUICK_PID=
LIGHT_PID=
stop_beside() {  # on an interrupt: end the sessions beside round 1 and show what they printed so far
  for pid in $QUICK_PID $LIGHT_PID; do kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  cat "$LIGHT_LOG" "$QUICK_LOG" 2>/dev/null; rm -f "$LIGHT_LOG" "$QUICK_LOG"
}
trap 'stop_beside; exit 130' INT
trap 'stop_beside; exit 143' TERM

echo "[tests] round 1 of 2: the tests that boot real servers and containers, two at a time; beside them, those of round 1 that boot none, and at a lower priority the unit, plugin and benchmark tests"
# The output of the sessions beside round 1 is held back and printed when they end, so they do not interleave.
QUICK_LOG=$(mktemp)
LIGHT_LOG=$(mktemp)
VLLMQUAL_TIMES_SESSION=quick- nice -n "${VLLMQUAL_QUICK_NICE:-10}" "$PYTEST" -p no:vllmqual -n 2 --dist loadgroup \
  -m "not wall_clock" "${QUICK[@]}" --ignore="$FLEET_BENCH" "$@" > "$QUICK_LOG" 2>&1 &
QUICK_PID=$!
VLLMQUAL_TIMES_SESSION=light- "$PYTEST" -p no:vllmqual --lane light tests "${ignore[@]}" "$@" > "$LIGHT_LOG" 2>&1 &
LIGHT_PID=$!
"$PYTEST" -p no:vllmqual -n 2 --dist loadgroup --lane servers tests "${ignore[@]}" "$@"
first=$?
[ "$first" -eq 2 ] && { stop_beside; echo "[tests] round 1 was interrupted; round 2 does not run"; exit 2; }
wait "$LIGHT_PID"
light=$?
LIGHT_PID=
[ "$light" -eq 5 ] && light=0  # pytest's "no tests collected": arguments that select none of this lane
echo "[tests] round 1's tests that boot no server (beside it):"
cat "$LIGHT_LOG"; rm -f "$LIGHT_LOG"
[ "$first" -eq 5 ] && first=0  # the same for the servers' lane
[ "$first" -eq 0 ] && first=$light
# The docker image `make test` builds beside round 1 (the docker tests waited for it; nothing to wait
# for when they did, or when no build was started): ended before the fleet round, whose Ray boots it
# slowed past their deadlines; a failed build fails the run.
scripts/beside.sh wait docker-image
image=$?
[ "$first" -eq 0 ] && first=$image
# Chromium's install (nothing to wait for when a page test already did) and the type check, both
# started beside the tests by `make test` too.
for step in browser typecheck; do
  scripts/beside.sh wait "$step"
  code=$?
  [ "$first" -eq 0 ] && first=$code
done
echo "[tests] round 2 of 2: the Ray fleet tests, and beside them the wall_clock tests of the quick tiers (which go on beside both if not done)"
CLOCK_LOG=$(mktemp)
VLLMQUAL_TIMES_SESSION=clock- "$PYTEST" -p no:vllmqual -m wall_clock "${QUICK[@]}" --ignore="$FLEET_BENCH" "$@" \
  > "$CLOCK_LOG" 2>&1 &
CLOCK_PID=$!
"$PYTEST" -p no:vllmqual "${FLEET[@]}" "$@"
second=$?
wait "$CLOCK_PID"
clock=$?
[ "$clock" -eq 5 ] && clock=0  # pytest's "no tests collected": arguments that select no wall_clock test
echo "[tests] the wall_clock tests (beside round 2):"
cat "$CLOCK_LOG"; rm -f "$CLOCK_LOG"
wait "$QUICK_PID"
quick=$?
QUICK_PID=
echo "[tests] the unit, plugin and benchmark tests (beside both rounds):"
cat "$QUICK_LOG"; rm -f "$QUICK_LOG"
[ "$first" -ne 0 ] && exit "$first"
[ "$quick" -ne 0 ] && exit "$quick"
[ "$clock" -ne 0 ] && exit "$clock"
exit "$second"
