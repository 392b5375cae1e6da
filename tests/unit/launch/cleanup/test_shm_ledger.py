"""The shm ledger and the frozen last look before SIGKILL.

CI once kept three 240 MiB ``psm_*`` files of a pytest SIGKILLed while vLLM was starting: the
reaper looked at what the run held once, then killed it, and the engine made its message queues
in between. These tests use real child processes that map files the way vLLM's processes do
(``os.ftruncate`` + ``mmap``, descriptor closed), in a temporary directory standing in for
/dev/shm, except the reaper test, which needs the reaper's own root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ROOT
from support.gatekit import wait_for

from pytest_vllmqual.launch.cleanup.owner import process_start
from pytest_vllmqual.launch.cleanup.procs import RUN_ENV, freeze_run, kill_run, processes_of_run, read_proc
from pytest_vllmqual.launch.cleanup.reaper import reaper_command
from pytest_vllmqual.launch.cleanup.shm import SHM_ROOT, reclaim_run_shm, shm_names_held_by
from pytest_vllmqual.launch.cleanup.shm_ledger import ShmLedger

SERVER = """
import mmap, os, signal, sys, time
root, at_start, on_term, forks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def segment(name):
    fd = os.open(os.path.join(root, name), os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 4096)
    m = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED)
    os.close(fd)
    return m
held = [segment(name) for name in at_start.split(",") if name]
def on_sigterm(signum, frame):  # a server mid-startup: still making its queues when told to stop
    if on_term:
        held.append(segment(on_term))
    time.sleep(60)
signal.signal(signal.SIGTERM, on_sigterm)
for _ in range(forks):
    if os.fork() == 0:
        while True:
            time.sleep(1)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def start_server(root: Path, run_id: str, *, at_start: str = "", on_term: str = "", forks: int = 0) -> subprocess.Popen[bytes]:
    """A process tree in its own session, marked with the run id, holding ``at_start`` mapped."""
    child = subprocess.Popen([sys.executable, "-c", SERVER, str(root), at_start, on_term, str(forks)],
                             stdout=subprocess.PIPE, start_new_session=True, env={**os.environ, RUN_ENV: run_id})
    assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
    return child


@pytest.fixture
def run_id() -> Iterator[str]:
    name = f"ledger-{uuid.uuid4().hex[:8]}"
    yield name
    for proc in processes_of_run(name):
        os.kill(proc.pid, signal.SIGKILL)


def wait_until(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def wait_for_start(pid: int) -> str | None:
    """The start time of a process just spawned (/proc shows it a moment after the fork)."""
    deadline = time.monotonic() + 5
    while process_start(pid) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return process_start(pid)


def test_ledger_keeps_the_names_of_a_holder_that_died(tmp_path: Path, run_id: str) -> None:
    """A process that held a segment and was SIGKILLed: a look after its death sees nothing,
    the ledger still names the segment, and the reclaim removes it."""
    server = start_server(tmp_path, run_id, at_start="psm_queue_a")
    ledger = ShmLedger(lambda: [server.pid], root=tmp_path, interval_s=0.05).start()
    assert wait_until(lambda: "psm_queue_a" in ledger.names)
    server.kill()
    server.wait(timeout=10)
    assert shm_names_held_by([server.pid], root=tmp_path) == set(), "a look after the death sees nothing"
    names = ledger.stop()
    assert names == {"psm_queue_a"} and ledger.stop() == names
    left, record = reclaim_run_shm(run_id, names, time.time() - 60, root=tmp_path, settle_s=0.05)
    assert left == [] and not (tmp_path / "psm_queue_a").exists()
    assert record is not None and [item["name"] for item in record["reclaimed"]] == ["psm_queue_a"]


def test_kill_run_looks_last_with_every_survivor_frozen(tmp_path: Path, run_id: str) -> None:
    """A server that makes a new segment when told to stop, and outlives the grace period: the
    last look is taken while all its processes are stopped, and it names the new segment."""
    server = start_server(tmp_path, run_id, at_start="psm_queue_a", on_term="psm_queue_b", forks=1)
    looks: list[tuple[set[str], set[str]]] = []

    def observe(pids: list[int]) -> None:
        states = {info.status for info in map(read_proc, pids) if info is not None}
        looks.append((states, shm_names_held_by(pids, root=tmp_path)))

    survivors = kill_run(run_id, server.pid, grace_s=0.5, observe=observe)
    server.wait(timeout=10)
    assert survivors == []
    states, names = looks[-1]
    assert states == {"stopped"}, f"the last look was not taken with the tree stopped: {states}"
    assert names == {"psm_queue_a", "psm_queue_b"}
    assert len(looks) >= 3, "looked before the SIGTERM, during the grace period and frozen"


def test_freeze_run_stops_the_whole_tree(tmp_path: Path, run_id: str) -> None:
    server = start_server(tmp_path, run_id, forks=2)
    frozen = freeze_run(run_id, server.pid)
    assert len(frozen) == 3 and server.pid in {p.pid for p in frozen}
    assert {read_proc(p.pid).status for p in frozen} == {"stopped"}  # type: ignore[union-attr]
    assert kill_run(run_id, server.pid, grace_s=0.2) == []
    server.wait(timeout=10)


def _until_sampling(pid: int) -> None:
    """Wait until the reaper's ledger thread runs (its second thread): on a starved machine (this test
    once ran niced beside two real servers) the reaper could still be starting when a fixed wait had
    passed, and then never saw the segment it was to reclaim."""
    assert wait_for(lambda: len(os.listdir(f"/proc/{pid}/task")) >= 2, timeout_s=60.0, interval_s=0.05), \
        "the reaper's ledger never started"


def test_reaper_reclaims_a_segment_whose_holder_died_before_the_owner(run_id: str) -> None:
    """End to end, as after a SIGKILLed pytest: one process of the run made a segment in
    /dev/shm and died; then the owner dies. The reaper kills the rest and reclaims the segment,
    which it saw only while the holder lived."""
    name = f"psm_{run_id.replace('-', '_')}"  # a vLLM-like name that carries no pattern the reclaim knows
    assert run_id not in name
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    leader = start_server(SHM_ROOT, run_id)
    holder = subprocess.Popen([sys.executable, "-c", SERVER, str(SHM_ROOT), name, "", "0"], stdout=subprocess.PIPE,
                              env={**os.environ, RUN_ENV: run_id})
    reaper = subprocess.Popen(
        reaper_command(owner.pid, str(wait_for_start(owner.pid)), run_id, leader.pid, time.time()),
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        _until_sampling(reaper.pid)
        time.sleep(2.5)  # the reaper's ledger samples every second
        holder.kill()
        holder.wait(timeout=10)
        assert (SHM_ROOT / name).exists(), "the dead holder left its segment, as a SIGKILLed vLLM does"
        owner.kill()
        owner.wait(timeout=10)
        assert reaper.wait(timeout=60) == 0
        assert leader.wait(timeout=10) is not None
        assert processes_of_run(run_id) == []
        assert not (SHM_ROOT / name).exists(), "the reaper left the dead holder's segment"
    finally:
        for proc in (owner, leader, holder, reaper):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        (SHM_ROOT / name).unlink(missing_ok=True)


SEMAPHORE_HOLDER = """
import multiprocessing, time
lock = multiprocessing.get_context("spawn").Lock()  # spawn keeps the name: /dev/shm/sem.mp-*
print(lock._semlock.name, flush=True)
time.sleep(120)
"""


def test_a_named_semaphore_is_named_by_its_inode() -> None:
    """glibc creates a named semaphore under a temporary name and links it to ``sem.mp-*``, so
    its holder's maps show only the temporary name; the inode still names it. Killed with its
    resource tracker (as a run's whole session is), the holder leaves it behind: the ledger's
    name lets the reclaim remove it."""
    holder = subprocess.Popen([sys.executable, "-c", SEMAPHORE_HOLDER], stdout=subprocess.PIPE, start_new_session=True)
    assert holder.stdout is not None
    name = "sem." + holder.stdout.readline().decode().strip().lstrip("/")
    try:
        assert name.startswith("sem.mp-") and (SHM_ROOT / name).exists()
        maps = Path(f"/proc/{holder.pid}/maps").read_text()
        assert name not in maps, "the maps show the semaphore's final name: the inode match is not needed"
        held = shm_names_held_by([holder.pid])
        assert name in held
        os.killpg(holder.pid, signal.SIGKILL)  # the holder and its resource tracker
        holder.wait(timeout=10)
        assert wait_until(lambda: not processes_of_session(holder.pid))
        assert (SHM_ROOT / name).exists(), "the semaphore outlived its holder"
        left, _ = reclaim_run_shm("no-such-run", held, time.time() - 60, settle_s=0.05)
        assert left == [] and not (SHM_ROOT / name).exists()
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait(timeout=10)
        (SHM_ROOT / name).unlink(missing_ok=True)


def processes_of_session(session: int) -> list[int]:
    return [p.pid for p in processes_of_run("no-such-run", session)]
