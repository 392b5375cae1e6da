"""scripts/gpu/in_background.sh: a device step longer than one call runs in its own session and a
later call collects it (the TP=2 A/B needs three cold starts of 90-160 s each plus its gates).

The commands here are small shell loops that wait for a file, so each test decides when the
step ends instead of racing a sleep."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from support import ROOT

SCRIPT = ROOT / "scripts" / "gpu" / "in_background.sh"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, check=False,
                          timeout=60)


def step_waiting_for(go: Path, exit_code: int) -> list[str]:
    """A step that prints a line, writes a public report and a private log, waits for ``go``, prints
    another line and exits with ``exit_code``."""
    return ["bash", "-c", f"mkdir -p out/reports/private/run && echo raw > out/reports/private/run/server.log; "
                          f"echo '{{}}' > out/reports/r.json; echo first; while [ ! -f {go} ]; do sleep 0.1; done; "
                          f"echo second; exit {exit_code}"]


def test_a_step_outlives_its_starter_and_a_later_wait_collects_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    work, go, out = tmp_path / "step", tmp_path / "go", tmp_path / "out"
    work.mkdir()
    monkeypatch.chdir(work)  # the step writes out/ relative to where it was started
    started = run("start", work, *step_waiting_for(go, 3))
    assert started.returncode == 0, started.stderr
    pid = int((work / "pid").read_text())
    assert os.getsid(pid) == pid  # a session of its own: the end of the starting call does not end it

    again = run("start", work, "true")
    assert again.returncode == 2 and "already runs" in again.stderr

    waiting = run("wait", work, "1", out)
    assert waiting.returncode == 75 and "first" in waiting.stdout and "call wait again" in waiting.stdout

    go.touch()
    ended = run("wait", work, "30", out)
    assert ended.returncode == 3, ended.stdout + ended.stderr
    assert "second" in ended.stdout and "first" not in ended.stdout  # only the lines not shown before
    assert "ended with exit 3" in ended.stdout
    with tarfile.open(out / "in_background.tar.gz") as archive:
        names = archive.getnames()
    assert "./out/reports/r.json" in names and "./log" in names
    assert not any("private" in name for name in names)  # raw server logs stay on the machine
    assert sorted(p.name for p in out.iterdir()) == ["in_background.tar.gz"]  # one file back, whatever the step wrote


def test_a_step_killed_without_an_exit_status_is_named(tmp_path: Path) -> None:
    work = tmp_path / "step"
    assert run("start", work, "sleep", "30").returncode == 0
    os.killpg(int((work / "pid").read_text()), 9)
    ended = run("wait", work, "10")
    assert ended.returncode == 70 and "without an exit status" in ended.stdout


def test_bad_use_prints_the_usage_and_exits_2(tmp_path: Path) -> None:
    for args in ((), ("bogus", tmp_path), ("wait", tmp_path, "soon"), ("start", tmp_path)):
        done = run(*args)
        assert done.returncode == 2 and "start DIR CMD" in done.stderr, args
    nothing = run("wait", tmp_path / "never", "1")
    assert nothing.returncode == 2 and "nothing was started" in nothing.stderr


def test_waits_one_after_another_show_every_line_once(tmp_path: Path) -> None:
    """A step that writes all the time: the lines printed by successive waits, put together, are the
    log, with nothing lost between measuring the log and printing it."""
    work = tmp_path / "step"
    assert run("start", work, "bash", "-c", "for i in $(seq 1 1000); do echo line $i; sleep 0.001; done").returncode == 0
    shown: list[str] = []
    for _ in range(30):
        waited = run("wait", work, "1")
        shown += [line for line in waited.stdout.splitlines() if not line.startswith("=== ")]
        if waited.returncode != 75:
            break
    assert waited.returncode == 0, waited.stdout
    assert shown == (work / "log").read_text().splitlines()
