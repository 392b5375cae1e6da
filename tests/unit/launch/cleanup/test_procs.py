"""The process facts the cleanup acts on (``launch.cleanup.procs`` over psutil) and the one
process start time (``launch.cleanup.owner.process_start``), on real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from pytest_vllmqual.launch.cleanup.owner import boot_id, owner_alive, process_start
from pytest_vllmqual.launch.cleanup.procs import (
    RUN_ENV,
    environment_at_start,
    processes_of_run,
    read_proc,
    terminate_then_kill,
)

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _wait_for(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_a_stopped_then_dead_child_reads_as_stopped_then_gone() -> None:
    child = subprocess.Popen(SLEEP)
    try:
        os.kill(child.pid, signal.SIGSTOP)
        _wait_for(lambda: (info := read_proc(child.pid)) is not None and info.stopped)
        info = read_proc(child.pid)
        assert info is not None and (info.status, info.stopped, info.gone) == ("stopped", True, False)
        assert info.ppid == os.getpid() and info.session == os.getsid(os.getpid())
        os.kill(child.pid, signal.SIGKILL)
        _wait_for(lambda: (info := read_proc(child.pid)) is not None and info.gone)
        zombie = read_proc(child.pid)
        assert zombie is not None and zombie.gone and zombie.stopped
        assert process_start(child.pid) is None, "a zombie is no owner"
    finally:
        child.kill()
        child.wait()
    assert read_proc(child.pid) is None


def test_the_start_time_is_the_kernel_s_start_ticks_and_names_one_process() -> None:
    child = subprocess.Popen(SLEEP)
    try:
        start = process_start(child.pid)
        assert start is not None and start.startswith(boot_id() + "/")
        ticks = int(start.rsplit("/", 1)[1])
        seconds = ticks / os.sysconf("SC_CLK_TCK") + psutil.boot_time()
        assert abs(seconds - psutil.Process(child.pid).create_time()) < 0.05
        assert process_start(child.pid) == start and owner_alive(child.pid, start)
        assert not owner_alive(child.pid, f"{boot_id()}/{ticks + 1}")
    finally:
        child.kill()
        child.wait()
    assert process_start(child.pid) is None


def test_a_run_s_processes_are_found_by_its_mark_or_its_session() -> None:
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    marked = subprocess.Popen(SLEEP, env={**os.environ, RUN_ENV: run_id})
    grouped = subprocess.Popen(SLEEP, start_new_session=True)
    other = subprocess.Popen(SLEEP, env={**os.environ, RUN_ENV: run_id + "-other"})
    try:
        found = {p.pid for p in processes_of_run(run_id, grouped.pid)}
        assert found == {marked.pid, grouped.pid}
        assert {p.pid for p in processes_of_run(run_id, None, exclude={marked.pid})} == set()
    finally:
        for proc in (marked, grouped, other):
            proc.kill()
            proc.wait()


def test_sigkill_is_sent_again_after_each_look_until_nothing_is_left() -> None:
    """A process the first SIGKILL missed (the scan before it could not read it yet) is found by
    a later look and killed by the SIGKILL sent after that look, within the kill wait."""
    sent: list[signal.Signals] = []

    def alive() -> bool:  # the tree ignores SIGTERM, and one process is only found after two SIGKILLs
        return sent.count(signal.SIGKILL) < 3

    assert terminate_then_kill(sent.append, alive, grace_s=0.05, poll_s=0.01)
    assert sent[0] == signal.SIGTERM and sent[1:] == [signal.SIGKILL] * 3


@pytest.mark.wall_clock
def test_a_process_that_outlives_the_kill_wait_is_reported() -> None:
    sent: list[signal.Signals] = []
    started = time.monotonic()
    assert not terminate_then_kill(sent.append, lambda: True, grace_s=0.05, poll_s=0.01, kill_wait_s=0.2)
    assert time.monotonic() - started < 2
    assert sent.count(signal.SIGKILL) >= 2


def test_the_environment_at_start_is_what_exec_gave_not_what_was_set_since() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.environ['SET_LATER'] = '1'; time.sleep(30)"],
                             env={**os.environ, "GIVEN_AT_START": "yes"})
    try:
        time.sleep(0.5)
        started = environment_at_start(child.pid)
        assert started is not None and started["GIVEN_AT_START"] == "yes" and "SET_LATER" not in started
    finally:
        child.kill()
        child.wait()
    assert environment_at_start(child.pid) is None, "a process that is gone has no environment to read"
