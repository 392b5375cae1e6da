#!/usr/bin/env bash
# Run one step of `make test` and record its seconds and exit code for the CI time table
# (scripts/ci_times.py). Usage: scripts/timed.sh TIER COMMAND [ARG...]
set -uo pipefail
tier=$1; shift
SECONDS=0
"$@"
code=$?
python3 "$(dirname "$0")/ci_times.py" record "$tier" "$SECONDS" "$code"
exit $code
