"""The CI time table: printed from whatever a run measured, also when it was cut short."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support import ROOT, load_script

SCRIPT = ROOT / "scripts" / "ci_times.py"


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


TIMED = SCRIPT.parent / "timed.sh"


def test_every_known_step_and_tier_is_listed_and_an_unknown_one_still_shows(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert run(times, "record", "lint", "3", "0").returncode == 0
    assert run(times, "record", "wheel-smoke", "4", "0").returncode == 0  # a step the table does not know
    lines = [{"nodeid": "tests/unit/test_a.py::test_a", "when": "call", "duration": 1.5, "tier": "unit"},
             {"nodeid": "tests/gpu/test_g.py::test_g", "when": "call", "duration": 2.5, "tier": "gpu"}]
    (times / "tests.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    text = run(times, "table").stdout
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}
    for step in ("setup", "typecheck", "model", "docker-image", "tests"):
        assert rows[step] == ["-", "not", "run"], (step, text)
    assert rows["lint"] == ["3", "ok"] and rows["wheel-smoke"] == ["4", "ok"]
    for tier in ("plugin", "integration", "faults", "docker", "packaging", "fleet", "load", "benchmarks"):
        assert rows[tier] == ["not", "run"], (tier, text)
    assert rows["unit"] == ["1.5"] and rows["gpu"] == ["2.5"]


def timed_under_timeout(times: Path, signal_name: str) -> subprocess.CompletedProcess[str]:
    """``scripts/timed.sh tests sleep 30`` stopped after 1 s by ``timeout -s SIGNAL`` (CI's budget)."""
    return subprocess.run(["timeout", "-s", signal_name, "1", "bash", str(TIMED), "tests", "sleep", "30"],
                          capture_output=True, text=True, check=False, timeout=20,
                          env={"VLLMQUAL_TIMES_DIR": str(times), "PATH": "/usr/bin:/bin"})


def test_a_step_stopped_by_sigterm_is_recorded_with_its_seconds(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert run(times, "record", "setup", "12", "0").returncode == 0
    assert timed_under_timeout(times, "TERM").returncode == 124
    text = run(times, "table").stdout
    row = next(line for line in text.splitlines() if line.startswith("tests "))
    # stopped after 1 s; recording the start and the stop each start Python (seconds on a busy machine)
    assert 1 <= int(row.split()[1]) <= 4 and "exit 143 (stopped by SIGTERM)" in row, text
    assert "setup" in text and "12" in text


def test_a_step_killed_outright_still_shows_as_stopped(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert timed_under_timeout(times, "KILL").returncode in (137, -9)  # timeout kills its own group too
    text = run(times, "table").stdout
    row = next(line for line in text.splitlines() if line.startswith("tests "))
    assert "stopped (no exit recorded)" in row, text


def test_a_failed_step_shows_its_exit_code_and_the_table_still_prints(tmp_path: Path) -> None:
    times = tmp_path / "times"
    done = subprocess.run(["bash", str(TIMED), "typecheck", "false"], capture_output=True, text=True, check=False,
                          env={"VLLMQUAL_TIMES_DIR": str(times), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    text = run(times, "table").stdout
    row = next(line for line in text.splitlines() if line.startswith("typecheck "))
    # `false` takes no time, but the step's seconds include recording its start (a Python start,
    # over a second on a busy 2-core machine).
    assert int(row.split()[1]) <= 2 and row.split()[2:] == ["exit", "1"], text


def test_the_table_knows_every_step_the_makefile_times() -> None:
    """The table's list of steps is the Makefile's: a step added to `make test` (or renamed) shows
    in its place, not as "not run" beside an unknown row."""
    import re

    ci_times = load_script(SCRIPT, "ci_times_under_test")
    recipe = (SCRIPT.parents[1] / "Makefile").read_text().split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    assert tuple(re.findall(r"^\t\$\(TIMED\) (\S+) ", recipe, re.M)) == ci_times.STEPS


def test_files_lists_seconds_per_test_file_slowest_first(tmp_path: Path) -> None:
    times = tmp_path / "times"
    times.mkdir()
    lines = [{"nodeid": "tests/a/test_x.py::test_1", "duration": 2.0}, {"nodeid": "tests/a/test_x.py::test_2", "duration": 3.0},
             {"nodeid": "tests/b/test_y.py::test_1[p]", "duration": 40.4}]
    (times / "tests.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = run(times, "files")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['    "tests/b/test_y.py": 40,', '    "tests/a/test_x.py": 5,']
