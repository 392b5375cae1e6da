#!/usr/bin/env bash
# Run one step of `make test` and record its seconds and exit code for the CI time table
# (scripts/ci_times.py). Usage: scripts/timed.sh TIER COMMAND [ARG...]
# The step's start is recorded first, so a step killed outright (SIGKILL) still shows as
# stopped; SIGTERM or SIGINT (CI's time budget, Ctrl-C) records the step with 143 or 130.
set -uo pipefail
tier=$1; shift
times=$(dirname "$0")/ci_times.py
SECONDS=0
python3 "$times" start "$tier"
trap 'python3 "$times" record "$tier" "$SECONDS" 143; exit 143' TERM
trap 'python3 "$times" record "$tier" "$SECONDS" 130; exit 130' INT
"$@"
code=$?
python3 "$times" record "$tier" "$SECONDS" "$code"
exit $code
