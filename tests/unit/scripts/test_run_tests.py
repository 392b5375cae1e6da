"""scripts/run_tests.sh: the kernel's autogroup scheduling is off while the tests run and back on after;
the quick tiers run beside the first round at a lower priority, its tests that boot no server beside it
at normal priority, the fleet tests alone after it.

A file stands in for /proc/sys/kernel/sched_autogroup_enabled (``VLLMQUAL_AUTOGROUP_FILE``), and a
fake pytest records what it read there during each session (five: the quick tiers, round 1's two
lanes, the fleet round and the wall_clock tests beside it)."""

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
    fake.write_text(f'#!/bin/sh\ncat "{setting}" >> "{seen}" 2>/dev/null || echo none >> "{seen}"\n'
                    f'echo "$(nice) $*" >> "{seen}.sessions"\nexit {exit_code}\n')
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "run_tests.sh")], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "PYTEST": str(fake), "VLLMQUAL_AUTOGROUP_FILE": str(setting), **env})
    return done, seen


def test_autogroup_is_off_during_both_rounds_and_back_on_after_even_when_they_fail(tmp_path: Path) -> None:
    done, seen = run(tmp_path, "1", exit_code=1)
    assert done.returncode == 1, done.stdout + done.stderr
    assert seen.read_text().split() == ["0", "0", "0", "0", "0"], "each round ran with autogroup off"
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
    assert seen.read_text().split() == ["0", "0", "0", "0", "0"] and "built halfway" in done.stdout


def test_a_setting_already_off_or_kept_is_left_alone(tmp_path: Path) -> None:
    done, seen = run(tmp_path, "0")
    assert done.returncode == 0 and seen.read_text().split() == ["0", "0", "0", "0", "0"]
    assert (tmp_path / "autogroup").read_text().strip() == "0" and "autogroup" not in done.stdout
    kept = tmp_path / "kept"
    kept.mkdir()
    done, seen = run(kept, "1", VLLMQUAL_KEEP_AUTOGROUP="1")
    assert seen.read_text().split() == ["1", "1", "1", "1", "1"] and (kept / "autogroup").read_text().strip() == "1"
    assert "autogroup" not in done.stdout


def test_the_quick_tiers_run_niced_beside_round_1_and_the_fleet_alone_after(tmp_path: Path) -> None:
    """The quick tiers at niceness 10 (less their wall_clock tests), round 1's two lanes (the servers two
    at a time, the rest in one session) and the fleet round at the caller's, and the wall_clock tests
    beside the fleet round at the caller's too."""
    done, seen = run(tmp_path, "0")
    assert done.returncode == 0, done.stdout + done.stderr
    sessions = Path(f"{seen}.sessions").read_text().splitlines()
    base = int(subprocess.run(["nice"], capture_output=True, text=True, check=True).stdout)
    (quick,) = [line for line in sessions if int(line.split()[0]) == min(base + 10, 19)]
    assert "tests/unit tests/plugin tests/benchmarks" in quick and "-n 2" in quick and "-m not wall_clock" in quick
    at_base = [line.split(" ", 1)[1] for line in sessions if int(line.split()[0]) == base]
    assert len(at_base) == 4, sessions
    (round_1,) = [line for line in at_base if "--lane servers" in line]
    assert "--ignore=tests/unit" in round_1 and "--ignore=tests/fleet" in round_1 and "-n 2" in round_1
    (light,) = [line for line in at_base if "--lane light" in line]
    assert "--ignore=tests/unit" in light and "--ignore=tests/fleet" in light and "-n" not in light.split()
    (clock,) = [line for line in at_base if "-m wall_clock" in line]
    assert "tests/unit tests/plugin tests/benchmarks" in clock
    (fleet,) = [line for line in at_base if "tests/fleet/" in line and "--lane" not in line]
    assert fleet.startswith("-p no:vllmqual tests/fleet/test_fleet_tiny_cpu.py tests/benchmarks/test_bench_fleet_quick.py")
    assert "(beside both rounds)" in done.stdout and "(beside round 2)" in done.stdout
    assert "boot no server (beside it)" in done.stdout


def test_a_failure_of_the_quick_tiers_alone_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    fake_dir = tmp_path / "bin"
    fake_dir.mkdir()
    fake = fake_dir / "pytest"
    fake.write_text('#!/bin/sh\ncase "$*" in *"tests/unit tests/plugin"*) echo quick failed; exit 1;; esac\nexit 0\n')
    fake.chmod(0o755)
    shutil.copy(SCRIPT, tmp_path / "scripts" / "run_tests.sh")
    shutil.copy(ROOT / "scripts" / "beside.sh", tmp_path / "scripts" / "beside.sh")
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "run_tests.sh")], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "PYTEST": str(fake), "VLLMQUAL_KEEP_AUTOGROUP": "1"})
    assert done.returncode == 1 and "quick failed" in done.stdout, done.stdout + done.stderr
