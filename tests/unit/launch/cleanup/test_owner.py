"""The local reaper knows its owner by pid and start time, as the docker reaper does.

A pid is reused by the kernel once its process is gone. A reaper that watched the pid alone
would keep a dead run's server alive for as long as an unrelated process holds that pid. These
tests use real processes: a live process stands for the pid's new holder, and a recorded start
time that differs from its own stands for the dead owner that held the pid before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from support import ROOT

from pytest_vllmqual.launch.cleanup import owner as owner_module
from pytest_vllmqual.launch.cleanup import reaper as local_reaper
from pytest_vllmqual.launch.cleanup.owner import boot_id, owner_alive, process_start
from pytest_vllmqual.launch.cleanup.procs import RUN_ENV, processes_of_run
from pytest_vllmqual.launch.docker import reaper as docker_reaper


@pytest.fixture
def run_id() -> Iterator[str]:
    name = f"reaper-{uuid.uuid4().hex[:8]}"
    yield name
    for proc in processes_of_run(name):
        os.kill(proc.pid, signal.SIGKILL)


def sleeper(env: dict[str, str] | None = None, *, session: bool = False) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env=env, start_new_session=session)
    deadline = time.monotonic() + 5
    while process_start(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def start_reaper(owner_pid: int, owner_start: str, run_id: str, server: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    argv = local_reaper.reaper_command(owner_pid, owner_start, run_id, server.pid, time.time())
    return subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)


def stop_all(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_reused_pid_does_not_keep_a_dead_runs_server_alive(run_id: str) -> None:
    """The owner's pid now belongs to a process that started at another time: the owner is gone,
    so the reaper kills the run at once, though a process with that pid still runs."""
    holder = sleeper()
    server = sleeper({**os.environ, RUN_ENV: run_id}, session=True)
    ticks = int(str(process_start(holder.pid)).rsplit("/", 1)[1])
    dead_owner_start = f"{boot_id()}/{ticks - 1}"
    reaper = start_reaper(holder.pid, dead_owner_start, run_id, server)
    try:
        assert reaper.wait(timeout=30) == 0
        assert server.wait(timeout=10) is not None
        assert processes_of_run(run_id) == []
        assert holder.poll() is None, "the process now holding the pid is not the reaper's to kill"
    finally:
        stop_all(reaper, server, holder)


def test_a_live_owner_keeps_its_server_until_it_dies(run_id: str) -> None:
    """The owner runs with the start time the reaper was given: the server is left alone until
    the owner dies, then the reaper kills it."""
    owner = sleeper()
    server = sleeper({**os.environ, RUN_ENV: run_id}, session=True)
    reaper = start_reaper(owner.pid, str(process_start(owner.pid)), run_id, server)
    try:
        time.sleep(1.5)
        assert reaper.poll() is None and server.poll() is None, "the reaper killed a live owner's server"
        owner.kill()
        owner.wait(timeout=10)
        assert reaper.wait(timeout=30) == 0
        assert server.wait(timeout=10) is not None
    finally:
        stop_all(reaper, server, owner)


def test_both_reapers_share_one_liveness_check() -> None:
    """One check, pid and start time, for the local and the docker reaper."""
    assert local_reaper.owner_alive is owner_module.owner_alive
    assert docker_reaper.owner_alive is owner_module.owner_alive
    proc = sleeper()
    try:
        start = str(process_start(proc.pid))
        assert owner_alive(proc.pid, start)
        assert not owner_alive(proc.pid, start + "0")
    finally:
        stop_all(proc)
    assert not owner_alive(proc.pid, start)


def test_each_reaper_reads_the_command_line_its_launcher_writes() -> None:
    """The launch code and the reaper agree on the argument order."""
    argv = local_reaper.reaper_command(11, "boot/22", "run-x", 33, 44.5)
    assert argv[:3] == [sys.executable, "-m", "pytest_vllmqual.launch.cleanup.reaper"]
    assert local_reaper.parse_args(argv[3:]) == (11, "boot/22", "run-x", 33, 44.5)
    argv = docker_reaper.reaper_command("11", "boot/22", "run-x", 44.5, ipc_host=True)
    assert argv[:3] == [sys.executable, "-m", "pytest_vllmqual.launch.docker.reaper"]
    assert docker_reaper.parse_args(argv[3:]) == (11, "boot/22", "run-x", 44.5, True)
