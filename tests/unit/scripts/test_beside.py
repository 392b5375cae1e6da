"""scripts/beside.sh: a step of `make test` run beside the others, waited for where it is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support import ROOT

SCRIPT = ROOT / "scripts" / "beside.sh"


def copy_script(tmp_path: Path) -> Path:
    """The script in a scratch tree (it keeps its files under build/beside of its own tree)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "beside.sh")
    return tmp_path / "scripts" / "beside.sh"


def beside(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60, check=False)


def test_wait_prints_the_step_s_output_and_exits_with_its_status(tmp_path: Path) -> None:
    script = copy_script(tmp_path)
    started = beside(script, "start", "step", "bash", "-c", "sleep 1; echo built; exit 3")
    assert started.returncode == 0 and "step started in the background" in started.stdout
    waited = beside(script, "wait", "step")
    assert waited.returncode == 3, waited.stdout
    assert "built" in waited.stdout and "step failed with exit code 3" in waited.stdout
    assert beside(script, "wait", "step").returncode == 0, "a step already waited for is not waited for again"


def test_wait_for_a_step_never_started_returns_at_once(tmp_path: Path) -> None:
    script = copy_script(tmp_path)
    waited = beside(script, "wait", "docker-image")
    assert waited.returncode == 0 and waited.stdout == ""


def test_a_passing_step_is_waited_for_until_it_ends(tmp_path: Path) -> None:
    script = copy_script(tmp_path)
    assert beside(script, "start", "step", "bash", "-c", "sleep 2; echo done").returncode == 0
    waited = beside(script, "wait", "step")
    assert waited.returncode == 0 and "done" in waited.stdout
    assert (tmp_path / "build" / "beside" / "step.log").read_text() == "done\n"


def test_bad_arguments_print_the_usage(tmp_path: Path) -> None:
    script = copy_script(tmp_path)
    out = beside(script, "start", "step")
    assert out.returncode == 2 and "beside.sh start NAME COMMAND" in out.stderr


def test_running_says_whether_the_step_still_runs(tmp_path: Path) -> None:
    script = copy_script(tmp_path)
    assert beside(script, "running", "step").returncode == 1, "a step never started is not running"
    assert beside(script, "start", "step", "bash", "-c", "sleep 3").returncode == 0
    assert beside(script, "running", "step").returncode == 0
    assert beside(script, "wait", "step").returncode == 0
    assert beside(script, "running", "step").returncode == 1, "an ended step is not running"
