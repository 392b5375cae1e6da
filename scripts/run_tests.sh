#!/usr/bin/env bash
# The project's own tests as `make test` runs them: two at a time (pytest-xdist; tests that share
# a server, a managed run or a Ray cluster stay in one worker, see tests/support/xdist_groups.py), in two
# rounds. A real server's boot leaves one core idle for about half of it, which the second worker
# fills. The Ray fleet tests run in the second round, beside the quick tiers only (unit, plugin,
# benchmarks): beside a second real server, a local Ray cluster missed its start-up deadlines.
# Both rounds run even when tests of the first fail; an interrupted first round (Ctrl-C, SIGTERM:
# pytest's exit status 2) ends the run. The exit status is the first round's failure, else the
# second's. The project's tests are not a qualification run: `-p no:vllmqual` keeps the plugin
# inert in the outer pytest (pyproject.toml's vllmqual_recipe would otherwise make the xdist
# controller boot a tiny-cpu server that no test uses); the sessions the tests start load it.
#   scripts/run_tests.sh [PYTEST ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."
trap 'exit 130' INT
trap 'exit 143' TERM
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
QUICK_AND_FLEET=(tests/fleet tests/unit tests/plugin tests/benchmarks)
ignore=()
for folder in "${QUICK_AND_FLEET[@]}"; do ignore+=("--ignore=$folder"); done

echo "[tests] round 1 of 2: the tests that boot real servers and containers, two at a time"
"$PYTEST" -p no:vllmqual -n 2 --dist loadgroup tests "${ignore[@]}" "$@"
first=$?
[ "$first" -eq 2 ] && { echo "[tests] round 1 was interrupted; round 2 does not run"; exit 2; }
# The docker image `make test` builds beside round 1 (the docker tests waited for it; nothing to wait
# for when they did, or when no build was started): ended before the fleet round, whose Ray boots it
# slowed past their deadlines; a failed build fails the run.
scripts/beside.sh wait docker-image
image=$?
[ "$first" -eq 0 ] && first=$image
echo "[tests] round 2 of 2: the Ray fleet tests beside the unit, plugin and benchmark tests"
"$PYTEST" -p no:vllmqual -n 2 --dist loadgroup "${QUICK_AND_FLEET[@]}" "$@"
second=$?
[ "$first" -ne 0 ] && exit "$first"
exit "$second"
