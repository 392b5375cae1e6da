"""The CI time table: printed from whatever a run measured, also when it was cut short."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ci_times.py"


def run(times: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                          env={"VLLMQUAL_TIMES_DIR": str(times), "PATH": "/usr/bin:/bin"})


def test_table_has_steps_tiers_and_the_slowest_tests_of_a_run_cut_short(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert run(times, "record", "setup", "12", "0").returncode == 0
    assert run(times, "record", "tests", "300", "124").returncode == 0  # stopped at its budget
    lines = [{"nodeid": f"tests/unit/test_a.py::test_{i}", "when": "call", "duration": i, "tier": "unit"}
             for i in range(12)]
    lines.append({"nodeid": "tests/faults/test_f.py::test_slow", "when": "setup", "duration": 80.0, "tier": "faults"})
    lines.append({"nodeid": "tests/faults/test_f.py::test_slow", "when": "call", "duration": 5.0, "tier": "faults"})
    (times / "tests.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + '\n{"nodeid": "torn')
    out = run(times, "table")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "setup" in text and "exit 124" in text and "all steps" in text
    assert "unit" in text and "66.0" in text  # 0 + 1 + ... + 11
    slowest = text.split("ten slowest tests")[1].strip().splitlines()[1:]
    assert len(slowest) == 10
    assert slowest[0].split() == ["85.0", "tests/faults/test_f.py::test_slow"]  # setup + call


def test_nothing_measured_says_so(tmp_path: Path) -> None:
    out = run(tmp_path / "empty", "table")
    assert out.returncode == 0 and "nothing was measured" in out.stdout


def test_bad_arguments_print_the_usage(tmp_path: Path) -> None:
    out = run(tmp_path, "record", "only-a-tier")
    assert out.returncode == 2 and "ci_times.py record TIER" in out.stderr
