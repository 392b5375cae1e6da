"""The CI time table: printed from whatever a run measured, also when it was cut short."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from support import ROOT, load_script
from support.gatekit import wait_for

SCRIPT = ROOT / "scripts" / "ci_times.py"


def run(times: Path, *args: str, baseline: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The script on ``times``; against ``baseline``, else against no baseline at all (a file that
    does not exist), so that the committed one does not change what these tests see."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                          env={"VLLMQUAL_TIMES_DIR": str(times), "PATH": "/usr/bin:/bin",
                               "VLLMQUAL_TIMES_BASELINE": str(baseline or times.parent / "no-baseline.json")})


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


def timed_then_signalled(times: Path, sig: signal.Signals) -> int:
    """``scripts/timed.sh tests sleep 30`` in a process group of its own, sent ``sig`` as a group (as CI's
    budget, ``timeout``, does) once the step runs: its start recorded and its command started. A fixed
    delay instead (``timeout 1``) once ran out before the step's start was recorded, in a quick-tier
    session niced beside two real servers. Returns the step's exit status."""
    step = subprocess.Popen(["bash", str(TIMED), "tests", "sleep", "30"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"VLLMQUAL_TIMES_DIR": str(times), "PATH": "/usr/bin:/bin"})
    try:
        running = wait_for(lambda: any("sleep" in child.name() for child in psutil.Process(step.pid).children()),
                           timeout_s=60.0, interval_s=0.05)
        assert running, "the step never started its command"
        os.killpg(step.pid, sig)
        return step.wait(timeout=30)
    finally:  # a step that never started, or outlived its signal, is not left behind
        if step.poll() is None:
            os.killpg(step.pid, signal.SIGKILL)
            step.wait()


def test_a_step_stopped_by_sigterm_is_recorded_with_its_seconds(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert run(times, "record", "setup", "12", "0").returncode == 0
    assert timed_then_signalled(times, signal.SIGTERM) == 143
    text = run(times, "table").stdout
    row = next(line for line in text.splitlines() if line.startswith("tests "))
    # Stopped as soon as its command ran, but bash's SECONDS counts whole clock seconds, and recording
    # the start and the stop each start Python (seconds on a busy machine).
    assert 0 <= int(row.split()[1]) <= 4 and "exit 143 (stopped by SIGTERM)" in row, text
    assert "setup" in text and "12" in text


def test_a_step_killed_outright_still_shows_as_stopped(tmp_path: Path) -> None:
    times = tmp_path / "times"
    assert timed_then_signalled(times, signal.SIGKILL) == -signal.SIGKILL
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
    timed = re.findall(r"^\t(?:scripts/beside\.sh start \S+ )?\$\(TIMED\) (\S+) ", recipe, re.M)
    assert tuple(timed) == ci_times.STEPS


def test_files_lists_seconds_per_test_file_slowest_first(tmp_path: Path) -> None:
    times = tmp_path / "times"
    times.mkdir()
    lines = [{"nodeid": "tests/a/test_x.py::test_1", "duration": 2.0}, {"nodeid": "tests/a/test_x.py::test_2", "duration": 3.0},
             {"nodeid": "tests/b/test_y.py::test_1[p]", "duration": 40.4}]
    (times / "tests.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = run(times, "files")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['    "tests/b/test_y.py": 40,', '    "tests/a/test_x.py": 5,']


def measured_run(times: Path, tiers: dict[str, float], steps: dict[str, float]) -> None:
    """A run's folder as ``make test`` leaves it: the steps that ended and one line per test phase."""
    for step, seconds in steps.items():
        assert run(times, "record", step, str(seconds), "0").returncode == 0
    lines = [{"nodeid": f"tests/{tier}/test_x.py::test_x", "when": "call", "duration": seconds, "tier": tier}
             for tier, seconds in tiers.items()]
    (times / "tests.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def write_baseline(path: Path, tiers: dict[str, float], steps: dict[str, float], **extra: object) -> Path:
    path.write_text(json.dumps({"source": "a run of the test", "steps": steps, "test_tiers": tiers, **extra}))
    return path


def table_rows(text: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}


def test_the_table_shows_each_tier_against_the_baseline_and_names_the_tiers_that_grew(tmp_path: Path) -> None:
    times = tmp_path / "times"
    measured_run(times, {"unit": 100.0, "faults": 600.0, "docker": 520.0, "identity": 9.0, "plugin": 80.0},
                 {"setup": 12, "tests": 1100})
    baseline = write_baseline(tmp_path / "baseline.json",
                              {"unit": 100.0, "faults": 500.0, "docker": 500.0, "identity": 3.0, "plugin": 120.0,
                               "fleet": 300.0},
                              {"setup": 12, "tests": 1000})
    out = run(times, "table", baseline=baseline)
    assert out.returncode == 0, out.stderr
    rows = table_rows(out.stdout)
    assert rows["faults"] == ["600.0", "500.0", "+20", "%"]
    assert rows["plugin"] == ["80.0", "120.0", "-33", "%"]
    assert rows["fleet"] == ["not", "run", "300.0", "not", "run"]
    assert rows["tests"] == ["1100", "1000", "+10", "%", "ok"]
    grew_line = next(line for line in out.stdout.splitlines() if "test tiers that grew" in line)
    # faults: +20 % and +100 s. docker: +4 %. identity: +200 % but 6 s. plugin shrank. fleet: not run.
    assert "more than 15 % and 10 s" in grew_line and grew_line.endswith(": faults 500 -> 600 s"), grew_line
    assert "no step grew by more than 15 % and 10 s" in out.stdout  # tests +10 %
    assert "a run of the test" in out.stdout


def test_the_tolerance_is_the_baselines_own_where_it_states_one(tmp_path: Path) -> None:
    times = tmp_path / "times"
    measured_run(times, {"unit": 110.0, "identity": 9.0}, {"tests": 1100})
    tiers, steps = {"unit": 100.0, "identity": 3.0}, {"tests": 1000}
    strict = write_baseline(tmp_path / "strict.json", tiers, steps, tolerance={"relative": 0.05, "absolute_s": 5})
    text = run(times, "table", baseline=strict).stdout
    assert "test tiers that grew by more than 5 % and 5 s: unit 100 -> 110 s, identity 3 -> 9 s" in text, text
    assert "steps that grew by more than 5 % and 5 s: tests 1000 -> 1100 s" in text, text
    loose = write_baseline(tmp_path / "loose.json", tiers, steps, tolerance={"relative": 0.5})  # seconds: the default
    text = run(times, "table", baseline=loose).stdout
    assert "no test tier grew by more than 50 % and 10 s" in text and "no step grew" in text, text


def test_growth_needs_both_the_share_and_the_seconds() -> None:
    ci_times = load_script(SCRIPT, "ci_times_under_test")
    tolerance = {"relative": 0.15, "absolute_s": 10.0}
    assert ci_times.grew(116.0, 100.0, tolerance)
    assert not ci_times.grew(115.0, 100.0, tolerance)  # exactly the share is not past it
    assert not ci_times.grew(12.0, 2.0, tolerance)  # six times as long, but 10 s
    assert not ci_times.grew(1010.0, 1000.0, tolerance)
    assert ci_times.grew(11.0, 0.0, tolerance)
    assert ci_times.grown({"a": 200.0, "b": None, "c": 500.0}, {"a": 100.0, "b": 1.0}, tolerance) == ["a"]


def test_without_a_baseline_the_table_says_so_and_prints_as_before(tmp_path: Path) -> None:
    times = tmp_path / "times"
    measured_run(times, {"unit": 1.5}, {"lint": 3})
    text = run(times, "table").stdout
    rows = table_rows(text)
    assert rows["unit"] == ["1.5"] and rows["lint"] == ["3", "ok"]
    assert "no baseline to compare with" in text and "grew" not in text
    (tmp_path / "torn.json").write_text('{"steps": ')
    text = run(times, "table", baseline=tmp_path / "torn.json").stdout
    assert "no baseline to compare with" in text and table_rows(text)["unit"] == ["1.5"]


def test_baseline_writes_this_runs_seconds_and_keeps_the_tolerance(tmp_path: Path) -> None:
    times = tmp_path / "times"
    measured_run(times, {"unit": 100.04, "faults": 600.0}, {"setup": 12, "tests": 1100})
    baseline = write_baseline(tmp_path / "baseline.json", {"unit": 1.0}, {}, tolerance={"relative": 0.2, "absolute_s": 5})
    out = run(times, "baseline", "CI machine, fresh clone", baseline=baseline)
    assert out.returncode == 0, out.stderr
    data = json.loads(baseline.read_text())
    assert data["steps"] == {"setup": 12, "tests": 1100}
    assert data["test_tiers"] == {"unit": 100.0, "faults": 600.0}
    assert data["tolerance"] == {"relative": 0.2, "absolute_s": 5}
    assert data["source"] == "CI machine, fresh clone" and len(data["date"]) == 10
    assert "no step grew" in run(times, "table", baseline=baseline).stdout


def test_baseline_from_an_empty_run_leaves_the_baseline_alone(tmp_path: Path) -> None:
    baseline = write_baseline(tmp_path / "baseline.json", {"unit": 1.0}, {})
    before = baseline.read_text()
    out = run(tmp_path / "empty", "baseline", "nothing ran", baseline=baseline)
    assert out.returncode == 1 and "nothing was measured" in out.stderr
    assert baseline.read_text() == before
    assert run(tmp_path / "empty", "baseline", baseline=baseline).returncode == 2  # a baseline says where it came from


def test_the_committed_baseline_names_every_tier_and_step_and_is_outside_the_emptied_folder() -> None:
    """``make test`` empties its times folder first: the baseline must live outside it, and must
    know every tier and step, or a tier's growth would go unnamed."""
    ci_times = load_script(SCRIPT, "ci_times_under_test")
    committed = ci_times.read_baseline(ROOT / "reports" / "ci-times" / "baseline.json")
    assert committed is not None and committed["source"]
    assert set(committed["test_tiers"]) == set(ci_times.TEST_TIERS)
    assert set(committed["steps"]) == set(ci_times.STEPS)
    makefile = (ROOT / "Makefile").read_text()
    emptied = makefile.split("VLLMQUAL_TIMES_DIR ?= $(CURDIR)/", 1)[1].split()[0]
    assert emptied == "reports/ci-times/latest" and "reports/ci-times/latest" in (ROOT / ".ci" / "run").read_text()
    assert not (ROOT / "reports" / "ci-times" / "baseline.json").is_relative_to(ROOT / emptied)


def test_a_step_run_beside_the_others_shows_the_run_end_to_end(tmp_path: Path) -> None:
    """The docker image is built beside lint and the first round: the steps then add up to more than
    the run took, and the table says how long it took from the first start to the last end."""
    times = tmp_path / "times"
    times.mkdir()
    (times / "started.tsv").write_text("setup\t1000\ndocker-image\t1010\nlint\t1010\ntests\t1020\n")
    (times / "steps.tsv").write_text("setup\t10\t0\ndocker-image\t200\t0\nlint\t10\t0\ntests\t300\t0\n")
    text = run(times, "table").stdout
    assert [line.split()[:3] for line in text.splitlines() if line.startswith(("all steps", "end to end"))] == \
        [["all", "steps", "520"], ["end", "to", "end"]]
    assert "320  (a step ran beside the others)" in text


def test_steps_one_after_another_show_no_second_total(tmp_path: Path) -> None:
    times = tmp_path / "times"
    times.mkdir()
    (times / "started.tsv").write_text("setup\t1000\ntests\t1010\n")
    (times / "steps.tsv").write_text("setup\t10\t0\ntests\t300\t0\n")
    assert "end to end" not in run(times, "table").stdout
