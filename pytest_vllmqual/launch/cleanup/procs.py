"""Find and kill every process of a run, whatever became of the direct child.

vLLM's API server spawns an EngineCore, which spawns one worker per TP rank. Killing only
the direct child (vLLM's own test helper does) leaves workers holding memory. Each run's
server is therefore started in its own session *and* with ``VLLMQUAL_RUN_ID`` in its
environment; a process belongs to the run when either mark matches. The process facts come
from psutil (the reapers run in this package's interpreter, which has it); the session id,
which psutil does not give, from ``os.getsid``. The scan over every process (the shm ledgers
run it every second while a server runs) asks only for the two marks, and reads the environment
as the raw ``/proc/PID/environ`` bytes: psutil's parse of it costs five times as much per process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

RUN_ENV = "VLLMQUAL_RUN_ID"
_GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
_STOPPED = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})


@dataclass(frozen=True)
class ProcInfo:
    """The facts about one process needed to decide whether it is ours."""

    pid: int
    ppid: int
    session: int
    status: str
    """psutil's word for the process's state (``running``, ``sleeping``, ``stopped``, ``zombie``, ...)."""
    name: str

    @property
    def gone(self) -> bool:
        """A zombie or dead process: it runs no more, whatever its pid still shows."""
        return self.status in _GONE

    @property
    def stopped(self) -> bool:
        """Stopped (SIGSTOP) or stopped by a tracer, or gone: it cannot run until continued."""
        return self.status in _STOPPED or self.gone

    def describe(self) -> str:
        return f"pid {self.pid} {self.name}"


def read_proc(pid: int) -> ProcInfo | None:
    """The process's facts; None when it is gone (or this user may not read them)."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return ProcInfo(pid=pid, ppid=process.ppid(), session=os.getsid(pid), status=process.status(),
                            name=process.name())
    except (psutil.Error, OSError):
        return None


def _has_run_env(pid: int, run_id: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return b"\0" + f"{RUN_ENV}={run_id}".encode() + b"\0" in b"\0" + environ + b"\0"


def _in_session(pid: int, session: int | None) -> bool:
    try:
        return session is not None and os.getsid(pid) == session
    except OSError:  # gone
        return False


def processes_of_run(run_id: str, session: int | None = None, *, exclude: set[int] | None = None) -> list[ProcInfo]:
    """Live (non-zombie) processes that carry the run's env mark or belong to its session.

    The shm ledgers call this every second while a server runs, over every process of the
    machine: the marks are checked first, and only the run's processes are read in full."""
    skip = {os.getpid()} | (exclude or set())
    found: list[ProcInfo] = []
    for pid in psutil.pids():
        if pid in skip or not (_in_session(pid, session) or _has_run_env(pid, run_id)):
            continue
        info = read_proc(pid)
        if info is not None and not info.gone:
            found.append(info)
    return found


def kill_run(run_id: str, session: int | None, *, grace_s: float, exclude: set[int] | None = None,
             observe: Callable[[list[int]], None] | None = None) -> list[ProcInfo]:
    """SIGTERM the run's processes, SIGKILL what is left after ``grace_s``; return survivors.

    Stopped (SIGSTOP) processes ignore SIGTERM until continued, so they are sent SIGCONT
    with it; SIGKILL works on them regardless. ``observe`` (the shm ledger) is called with
    the run's pids before the SIGTERM, at each poll of the grace period, and once more with
    the survivors frozen right before the SIGKILL, so nothing the run creates meanwhile is
    unseen.
    """
    procs = processes_of_run(run_id, session, exclude=exclude)
    if observe is not None:
        observe([p.pid for p in procs])
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for proc in procs:
            signal_quietly(proc.pid, sig)
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.1)
        procs = processes_of_run(run_id, session, exclude=exclude)
        if observe is not None and procs:
            observe([p.pid for p in procs])
    if procs:
        procs = freeze_run(run_id, session, exclude=exclude)
        if observe is not None:
            observe([p.pid for p in procs])
    for proc in procs:
        signal_quietly(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while procs and time.monotonic() < deadline:
        time.sleep(0.05)
        procs = processes_of_run(run_id, session, exclude=exclude)
    return procs


def freeze_run(run_id: str, session: int | None, *, exclude: set[int] | None = None) -> list[ProcInfo]:
    """SIGSTOP every process of the run, again until no new one appears; the frozen processes.

    A child forked while its parent was being stopped shows up in the next scan, so the scan
    repeats until it finds no pid it has not stopped (a few rounds at most).
    """
    stopped: dict[int, ProcInfo] = {}
    for _ in range(10):
        fresh = [p for p in processes_of_run(run_id, session, exclude=exclude) if p.pid not in stopped]
        if not fresh:
            break
        for proc in fresh:
            signal_quietly(proc.pid, signal.SIGSTOP)
            stopped[proc.pid] = proc
    # SIGSTOP is delivered asynchronously: wait (briefly) until each one reports itself stopped
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        states = [read_proc(pid) for pid in stopped]
        if all(info is None or info.stopped for info in states):
            break
        time.sleep(0.01)
    return list(stopped.values())


def signal_quietly(pid: int, sig: signal.Signals) -> None:
    """Send ``sig``; a process that is gone, or not ours to signal, is not an error."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

__all__ = ["RUN_ENV", "ProcInfo", "freeze_run", "kill_run", "processes_of_run", "read_proc", "signal_quietly"]
