#!/usr/bin/env python3
"""The CI time table: seconds per tier and the ten slowest tests, printed at the end of every run.

Each step of ``make test`` runs under ``scripts/timed.sh``, which appends the step's start to
``started.tsv`` and, when it ends, one line (tier, seconds, exit code) to ``steps.tsv``; the
project's own pytest session appends one JSON line per test phase to ``tests.jsonl`` as it goes
(tests/conftest.py). All are written line by line, so a run that fails or is stopped part-way
still leaves what it measured, and ``table`` prints it: a step that started and never ended
shows as stopped, with the seconds since its start.

The table always lists the steps and test tiers that ``make test`` has (a missing one shows as
"not run"), then any other that was measured.

    python3 scripts/ci_times.py start TIER
    python3 scripts/ci_times.py record TIER SECONDS EXIT_CODE
    python3 scripts/ci_times.py table
    python3 scripts/ci_times.py files     # seconds per test file, for tests/support/xdist_groups.py

The folder is ``$VLLMQUAL_TIMES_DIR``, else ``reports/ci-times`` (ignored by git).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("setup", "lint", "typecheck", "model", "docker-image", "tests")
"""The steps of ``make test``, in order."""
TEST_TIERS = ("unit", "plugin", "integration", "identity", "faults", "docker", "packaging", "fleet", "load", "benchmarks")
"""The folders under tests/, in the order the table lists them."""


def times_dir() -> Path:
    return Path(os.environ.get("VLLMQUAL_TIMES_DIR") or ROOT / "reports" / "ci-times")


def record(tier: str, seconds: str, exit_code: str) -> None:
    folder = times_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "steps.tsv", "a", encoding="utf-8") as out:
        out.write(f"{tier}\t{float(seconds):.0f}\t{int(exit_code)}\n")


def start(tier: str) -> None:
    folder = times_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "started.tsv", "a", encoding="utf-8") as out:
        out.write(f"{tier}\t{time.time():.0f}\n")


def read_started(folder: Path) -> dict[str, float]:
    """When each step started (epoch seconds); a torn line is skipped."""
    path = folder / "started.tsv"
    started: dict[str, float] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split("\t")
            if len(parts) == 2:
                try:
                    started[parts[0]] = float(parts[1])
                except ValueError:
                    continue
    return started


def read_steps(folder: Path) -> list[tuple[str, float, int]]:
    path = folder / "steps.tsv"
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            try:
                steps.append((parts[0], float(parts[1]), int(parts[2])))
            except ValueError:
                continue
    return steps


def read_tests(folder: Path) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(seconds per test tier, per test, per worker) from the per-phase lines; a torn last line is skipped."""
    per_tier: dict[str, float] = defaultdict(float)
    per_test: dict[str, float] = defaultdict(float)
    per_worker: dict[str, float] = defaultdict(float)
    path = folder / "tests.jsonl"
    if not path.is_file():
        return per_tier, per_test, per_worker
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        seconds = float(entry.get("duration", 0.0))
        per_tier[str(entry.get("tier", "other"))] += seconds
        per_test[str(entry.get("nodeid", "?"))] += seconds
        per_worker[str(entry.get("worker", "main"))] += seconds
    return per_tier, per_test, per_worker


def step_rows(folder: Path) -> list[tuple[str, float | None, str]]:
    """(step, seconds, result) for every step of ``make test`` and every other step measured."""
    ended = {tier: (seconds, code) for tier, seconds, code in read_steps(folder)}
    started = read_started(folder)
    rows: list[tuple[str, float | None, str]] = []
    for tier in [*STEPS, *sorted((set(ended) | set(started)) - set(STEPS))]:
        if tier in ended:
            seconds, code = ended[tier]
            result = "ok" if code == 0 else {124: "exit 124 (timed out)", 143: "exit 143 (stopped by SIGTERM)",
                                             130: "exit 130 (interrupted)"}.get(code, f"exit {code}")
            rows.append((tier, seconds, result))
        elif tier in started:
            rows.append((tier, max(0.0, time.time() - started[tier]), "stopped (no exit recorded)"))
        else:
            rows.append((tier, None, "not run"))
    return rows


def table() -> int:
    folder = times_dir()
    rows = step_rows(folder)
    per_tier, per_test, per_worker = read_tests(folder)
    if all(seconds is None for _, seconds, _ in rows) and not per_tier:
        print(f"[times] nothing was measured ({folder} is empty)")
        return 0
    print("\n==== CI time table (seconds) ====")
    print(f"{'step':<24}{'seconds':>9}  result")
    for tier, seconds, result in rows:
        print(f"{tier:<24}{'-' if seconds is None else f'{seconds:.0f}':>9}  {result}")
    print(f"{'all steps':<24}{sum(s for _, s, _ in rows if s is not None):>9.0f}")
    print(f"\n{'test tier':<24}{'seconds':>9}")
    for tier in [*TEST_TIERS, *sorted(set(per_tier) - set(TEST_TIERS))]:
        print(f"{tier:<24}{f'{per_tier[tier]:.1f}' if tier in per_tier else 'not run':>9}")
    if len(per_worker) > 1:
        print("(tests ran on several workers at once: tiers add up to more than the tests step)")
        print(f"\n{'worker':<24}{'busy s':>9}")
        for worker, seconds in sorted(per_worker.items()):
            print(f"{worker:<24}{seconds:>9.1f}")
    if per_test:
        print("\nten slowest tests (setup + call + teardown):")
        for nodeid, seconds in sorted(per_test.items(), key=lambda item: -item[1])[:10]:
            print(f"{seconds:>8.1f}  {nodeid}")
    return 0


def files() -> int:
    """Seconds per test file, slowest first, in the form ``FILE_SECONDS`` (tests/support/xdist_groups.py)
    takes: the order in which ``make test`` starts its groups of tests."""
    _per_tier, per_test, _per_worker = read_tests(times_dir())
    per_file: dict[str, float] = defaultdict(float)
    for nodeid, seconds in per_test.items():
        per_file[nodeid.split("::")[0]] += seconds
    for path, seconds in sorted(per_file.items(), key=lambda item: -item[1]):
        print(f'    "{path}": {seconds:.0f},')
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"] and len(argv) == 2:
        start(argv[1])
        return 0
    if argv[:1] == ["record"] and len(argv) == 4:
        record(*argv[1:])
        return 0
    if argv == ["table"]:
        return table()
    if argv == ["files"]:
        return files()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
