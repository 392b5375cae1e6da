"""scripts/run_tests.sh: the kernel's autogroup scheduling is off while the tests run and back on after.

A file stands in for /proc/sys/kernel/sched_autogroup_enabled (``VLLMQUAL_AUTOGROUP_FILE``), and a
fake pytest records what it read there during each round."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from support import ROOT

SCRIPT = ROOT / "scripts" / "run_tests.sh"


def run(tmp_path: Path, autogroup: str | None, exit_code: int = 0, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(SCRIPT, tmp_path / "scripts" / "run_tests.sh")
    shutil.copy(ROOT / "scripts" / "beside.sh", tmp_path / "scripts" / "beside.sh")
    setting = tmp_path / "autogroup"
    if autogroup is not None:
        setting.write_text(autogroup + "\n")
    seen = tmp_path / "seen"
    fake = tmp_path / "fake-pytest"
    fake.write_text(f'#!/bin/sh\ncat "{setting}" >> "{seen}" 2>/dev/null || echo none >> "{seen}"\nexit {exit_code}\n')
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "run_tests.sh")], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "PYTEST": str(fake), "VLLMQUAL_AUTOGROUP_FILE": str(setting), **env})
    return done, seen


def test_autogroup_is_off_during_both_rounds_and_back_on_after_even_when_they_fail(tmp_path: Path) -> None:
    done, seen = run(tmp_path, "1", exit_code=1)
    assert done.returncode == 1, done.stdout + done.stderr
    assert seen.read_text().split() == ["0", "0"], "each round ran with autogroup off"
    assert (tmp_path / "autogroup").read_text().strip() == "1"
    assert "autogroup scheduling off" in done.stdout and "back on" in done.stdout


def test_a_docker_image_build_that_failed_beside_the_first_round_fails_the_run(tmp_path: Path) -> None:
    """The image build `make test` starts beside the first round ends before the fleet round starts,
    and its failure is the run's, though every test passed (no docker test waited for it)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "beside.sh", tmp_path / "scripts" / "beside.sh")
    subprocess.run(["bash", str(tmp_path / "scripts" / "beside.sh"), "start", "docker-image", "bash", "-c",
                    "echo built halfway; exit 4"], check=True, capture_output=True, timeout=30)
    done, seen = run(tmp_path, "0")
    assert done.returncode == 4, done.stdout + done.stderr
    assert seen.read_text().split() == ["0", "0"] and "built halfway" in done.stdout


def test_a_setting_already_off_or_kept_is_left_alone(tmp_path: Path) -> None:
    done, seen = run(tmp_path, "0")
    assert done.returncode == 0 and seen.read_text().split() == ["0", "0"]
    assert (tmp_path / "autogroup").read_text().strip() == "0" and "autogroup" not in done.stdout
    kept = tmp_path / "kept"
    kept.mkdir()
    done, seen = run(kept, "1", VLLMQUAL_KEEP_AUTOGROUP="1")
    assert seen.read_text().split() == ["1", "1"] and (kept / "autogroup").read_text().strip() == "1"
    assert "autogroup" not in done.stdout
