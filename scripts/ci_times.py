#!/usr/bin/env python3
"""The CI time table: seconds per tier and the ten slowest tests, printed at the end of every run.

Each step of ``make test`` runs under ``scripts/timed.sh``, which appends one line (tier, seconds,
exit code) to ``steps.tsv``; the project's own pytest session appends one JSON line per test phase
to ``tests.jsonl`` as it goes (tests/conftest.py). Both are written line by line, so a run that
fails or is stopped part-way still leaves what it measured, and ``table`` prints it.

    python3 scripts/ci_times.py record TIER SECONDS EXIT_CODE
    python3 scripts/ci_times.py table

The folder is ``$VLLMQUAL_TIMES_DIR``, else ``reports/ci-times`` (ignored by git).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_TIERS = ("unit", "plugin", "integration", "faults", "docker", "packaging", "fleet", "load", "benchmarks")


def times_dir() -> Path:
    return Path(os.environ.get("VLLMQUAL_TIMES_DIR") or ROOT / "reports" / "ci-times")


def record(tier: str, seconds: str, exit_code: str) -> None:
    folder = times_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "steps.tsv", "a", encoding="utf-8") as out:
        out.write(f"{tier}\t{float(seconds):.0f}\t{int(exit_code)}\n")


def read_steps(folder: Path) -> list[tuple[str, float, int]]:
    path = folder / "steps.tsv"
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            steps.append((parts[0], float(parts[1]), int(parts[2])))
    return steps


def read_tests(folder: Path) -> tuple[dict[str, float], dict[str, float]]:
    """(seconds per test tier, seconds per test) from the per-phase lines; a torn last line is skipped."""
    per_tier: dict[str, float] = defaultdict(float)
    per_test: dict[str, float] = defaultdict(float)
    path = folder / "tests.jsonl"
    if not path.is_file():
        return per_tier, per_test
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        per_tier[str(entry.get("tier", "other"))] += float(entry.get("duration", 0.0))
        per_test[str(entry.get("nodeid", "?"))] += float(entry.get("duration", 0.0))
    return per_tier, per_test


def table() -> int:
    folder = times_dir()
    steps = read_steps(folder)
    per_tier, per_test = read_tests(folder)
    if not steps and not per_tier:
        print(f"[times] nothing was measured ({folder} is empty)")
        return 0
    print("\n==== CI time table (seconds) ====")
    print(f"{'step':<24}{'seconds':>9}  result")
    for tier, seconds, code in steps:
        print(f"{tier:<24}{seconds:>9.0f}  {'ok' if code == 0 else f'exit {code}'}")
    if steps:
        print(f"{'all steps':<24}{sum(s for _, s, _ in steps):>9.0f}")
    if per_tier:
        print(f"\n{'test tier':<24}{'seconds':>9}")
        for tier in [*TEST_TIERS, *sorted(set(per_tier) - set(TEST_TIERS))]:
            if tier in per_tier:
                print(f"{tier:<24}{per_tier[tier]:>9.1f}")
        print("\nten slowest tests (setup + call + teardown):")
        for nodeid, seconds in sorted(per_test.items(), key=lambda item: -item[1])[:10]:
            print(f"{seconds:>8.1f}  {nodeid}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"] and len(argv) == 4:
        record(*argv[1:])
        return 0
    if argv == ["table"]:
        return table()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
