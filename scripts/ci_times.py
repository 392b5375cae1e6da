#!/usr/bin/env python3
"""The CI time table: seconds per tier and the ten slowest tests, printed at the end of every run.

Each step of ``make test`` runs under ``scripts/timed.sh``, which appends the step's start to
``started.tsv`` and, when it ends, one line (tier, seconds, exit code) to ``steps.tsv``; the
project's own pytest session appends one JSON line per test phase to ``tests.jsonl`` as it goes
(tests/conftest.py). All are written line by line, so a run that fails or is stopped part-way
still leaves what it measured, and ``table`` prints it: a step that started and never ended
shows as stopped, with the seconds since its start.

The table always lists the steps and test tiers that ``make test`` has (a missing one shows as
"not run"), then any other that was measured. Where a committed baseline exists, each row also
shows the baseline's seconds and the change, and the table ends by naming every step or tier that
grew by more than the baseline's tolerance (both a share and a number of seconds, so that noise on
a tier of a few seconds is not called growth): which part of CI got slower, not only that it did.

    python3 scripts/ci_times.py start TIER
    python3 scripts/ci_times.py record TIER SECONDS EXIT_CODE
    python3 scripts/ci_times.py table
    python3 scripts/ci_times.py files     # seconds per test file, for tests/support/xdist_groups.py
    python3 scripts/ci_times.py baseline NOTE   # this run's seconds become the committed baseline

The folder is ``$VLLMQUAL_TIMES_DIR``, else ``reports/ci-times/latest`` (ignored by git; ``make
test`` empties it first). The baseline is ``$VLLMQUAL_TIMES_BASELINE``, else
``reports/ci-times/baseline.json`` (committed), beside the folder and not in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("setup", "browser", "docker-image", "lint", "typecheck", "model", "tests")
"""The steps of ``make test``, in the order they start (chromium's install and the docker image run
beside the steps after them, see scripts/beside.sh)."""
TEST_TIERS = ("unit", "plugin", "integration", "identity", "faults", "docker", "packaging", "fleet", "load", "benchmarks")
"""The folders under tests/, in the order the table lists them."""


TOLERANCE = {"relative": 0.15, "absolute_s": 10.0}
"""How much a step or tier may grow against the baseline before the table names it, when the
baseline file does not say: two CI runs of one tree on the 2-core machine differ by up to 15 %,
and a tier of a few seconds moves by more than that between runs."""


def times_dir() -> Path:
    return Path(os.environ.get("VLLMQUAL_TIMES_DIR") or ROOT / "reports" / "ci-times" / "latest")


def baseline_path() -> Path:
    return Path(os.environ.get("VLLMQUAL_TIMES_BASELINE") or ROOT / "reports" / "ci-times" / "baseline.json")


def read_baseline(path: Path) -> dict[str, Any] | None:
    """The committed baseline: ``steps`` and ``test_tiers`` (seconds by name) and ``tolerance``;
    None when there is none or it cannot be read (the table then prints without it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data.setdefault("steps", {})
    data.setdefault("test_tiers", {})
    data["tolerance"] = {**TOLERANCE, **(data.get("tolerance") or {})}
    return data


def grew(seconds: float, baseline: float, tolerance: dict[str, float]) -> bool:
    """True when ``seconds`` is past the baseline by more than both the share and the seconds
    of the tolerance."""
    return seconds - baseline > max(tolerance["absolute_s"], baseline * tolerance["relative"])


def change(seconds: float | None, baseline: float | None) -> str:
    if seconds is None:
        return "not run"
    if baseline is None:
        return "new"
    if baseline <= 0:
        return f"{seconds - baseline:+.0f} s"
    return f"{(seconds - baseline) / baseline * 100:+.0f} %"


def grown(measured: dict[str, float | None], base: dict[str, float], tolerance: dict[str, float]) -> list[str]:
    """The names in ``measured`` that grew past ``base`` (a name the baseline lacks, or one not
    measured, is not called growth: there is nothing to compare)."""
    return [name for name, seconds in measured.items()
            if seconds is not None and name in base and grew(seconds, float(base[name]), tolerance)]


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
    base = read_baseline(baseline_path())
    print("\n==== CI time table (seconds) ====")
    print_steps(rows, base, read_started(folder))
    tiers = {tier: per_tier.get(tier) for tier in [*TEST_TIERS, *sorted(set(per_tier) - set(TEST_TIERS))]}
    print_tiers(tiers, base)
    if len(per_worker) > 1:
        print("(tests ran on several workers at once: tiers add up to more than the tests step)")
        print(f"\n{'worker':<24}{'busy s':>9}")
        for worker, seconds in sorted(per_worker.items()):
            print(f"{worker:<24}{seconds:>9.1f}")
    if base is None:
        print(f"\n(no baseline to compare with: {baseline_path()} is missing or unreadable)")
    else:
        print_growth({tier: seconds for tier, seconds, _ in rows}, tiers, base)
    if per_test:
        print("\nten slowest tests (setup + call + teardown):")
        for nodeid, seconds in sorted(per_test.items(), key=lambda item: -item[1])[:10]:
            print(f"{seconds:>8.1f}  {nodeid}")
    return 0


def end_to_end(rows: list[tuple[str, float | None, str]], started: dict[str, float]) -> float | None:
    """Seconds from the first step's start to the last one's end, or None without every start: a
    step run beside others (the docker image) makes this less than the steps' sum."""
    spans = [(started[tier], started[tier] + seconds) for tier, seconds, _ in rows
             if seconds is not None and tier in started]
    if not spans or len(spans) < sum(1 for _, seconds, _ in rows if seconds is not None):
        return None
    return max(end for _, end in spans) - min(begin for begin, _ in spans)


def print_steps(rows: list[tuple[str, float | None, str]], base: dict[str, Any] | None,
                started: dict[str, float]) -> None:
    if base is None:
        print(f"{'step':<24}{'seconds':>9}  result")
    else:
        print(f"{'step':<24}{'seconds':>9}{'baseline':>10}{'change':>10}  result")
    for tier, seconds, result in rows:
        shown = f"{tier:<24}{'-' if seconds is None else f'{seconds:.0f}':>9}"
        if base is not None:
            was = base["steps"].get(tier)
            shown += f"{'-' if was is None else f'{float(was):.0f}':>10}{change(seconds, was):>10}"
        print(f"{shown}  {result}")
    total = sum(s for _, s, _ in rows if s is not None)
    print(f"{'all steps':<24}{total:>9.0f}")
    wall = end_to_end(rows, started)
    if wall is not None and wall < total - 1:
        print(f"{'end to end':<24}{wall:>9.0f}  (a step ran beside the others)")


def print_tiers(tiers: dict[str, float | None], base: dict[str, Any] | None) -> None:
    if base is None:
        print(f"\n{'test tier':<24}{'seconds':>9}")
    else:
        print(f"\n{'test tier':<24}{'seconds':>9}{'baseline':>10}{'change':>10}")
    for tier, seconds in tiers.items():
        shown = f"{tier:<24}{'not run' if seconds is None else f'{seconds:.1f}':>9}"
        if base is not None:
            was = base["test_tiers"].get(tier)
            shown += f"{'-' if was is None else f'{float(was):.1f}':>10}{change(seconds, was):>10}"
        print(shown)


def print_growth(steps: dict[str, float | None], tiers: dict[str, float | None], base: dict[str, Any]) -> None:
    """The closing lines: which steps and tiers grew past the baseline's tolerance."""
    tolerance = base["tolerance"]
    rule = f"more than {tolerance['relative'] * 100:.0f} % and {tolerance['absolute_s']:.0f} s"
    print(f"\nagainst the baseline ({base.get('source', 'no source given')}):")
    for kind, measured, known in (("steps", steps, base["steps"]), ("test tiers", tiers, base["test_tiers"])):
        names = grown(measured, known, tolerance)
        if names:
            listed = ", ".join(f"{name} {float(known[name]):.0f} -> {measured[name]:.0f} s" for name in names)
            print(f"  {kind} that grew by {rule}: {listed}")
        else:
            print(f"  no {kind[:-1]} grew by {rule}")


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


def write_baseline(note: str) -> int:
    """This run's seconds (the steps that ended, every test tier) become the baseline, with the
    note (which machine, which run), the commit and the date; the tolerance is kept."""
    folder = times_dir()
    steps = {tier: seconds for tier, seconds, _code in read_steps(folder)}
    per_tier, _per_test, _per_worker = read_tests(folder)
    if not steps and not per_tier:
        print(f"[times] nothing was measured ({folder} is empty); the baseline is unchanged", file=sys.stderr)
        return 1
    path = baseline_path()
    previous = read_baseline(path) or {}
    data = {"source": note, "commit": _commit(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "tolerance": previous.get("tolerance", TOLERANCE),
            "steps": steps, "test_tiers": {tier: round(seconds, 1) for tier, seconds in per_tier.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"[times] baseline written: {path}")
    return 0


def _commit() -> str | None:
    """The checkout's commit, or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


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
    if argv[:1] == ["baseline"] and len(argv) == 2 and argv[1].strip():
        return write_baseline(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
