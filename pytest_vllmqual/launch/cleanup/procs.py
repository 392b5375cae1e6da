"""Find and kill every process of a run, whatever became of the direct child.

vLLM's API server spawns an EngineCore, which spawns one worker per TP rank. Killing only
the direct child (vLLM's own test helper does) leaves workers holding memory. Each run's
server is therefore started in its own session *and* with ``VLLMQUAL_RUN_ID`` in its
environment; a process belongs to the run when either mark matches. This module is
stdlib-only because the reaper imports it in a bare interpreter.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RUN_ENV = "VLLMQUAL_RUN_ID"
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    """The facts about one process needed to decide whether it is ours."""

    pid: int
    ppid: int
    session: int
    state: str
    name: str
    start_ticks: int | None = None
    """Clock ticks from boot to the process's start (field 22 of stat): with the pid, it names
    one process for the life of the boot, whatever reuses the pid later."""

    def describe(self) -> str:
        return f"pid {self.pid} {self.name}"


def read_proc(pid: int) -> ProcInfo | None:
    """Parse /proc/PID/stat; None when the process is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except OSError:
        return None
    close = raw.rfind(")")
    name = raw[raw.find("(") + 1 : close]
    fields = raw[close + 2 :].split()
    # fields: state ppid pgrp session ... (fields[19] is field 22, starttime)
    return ProcInfo(pid=pid, ppid=int(fields[1]), session=int(fields[3]), state=fields[0], name=name,
                    start_ticks=int(fields[19]) if len(fields) > 19 else None)


def _has_run_env(pid: int, run_id: str) -> bool:
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return b"\0" + f"{RUN_ENV}={run_id}".encode() + b"\0" in b"\0" + environ + b"\0"


def processes_of_run(run_id: str, session: int | None = None, *, exclude: set[int] | None = None) -> list[ProcInfo]:
    """Live (non-zombie) processes that carry the run's env mark or belong to its session.

    Plain string paths, not ``Path`` objects: the shm ledgers call this every second while a
    server runs, over every process of the machine."""
    skip = {os.getpid()} | (exclude or set())
    found: list[ProcInfo] = []
    for name in os.listdir(PROC):
        if not name.isdigit() or int(name) in skip:
            continue
        info = read_proc(int(name))
        if info is None or info.state in ("Z", "X"):
            continue
        if (session is not None and info.session == session) or _has_run_env(info.pid, run_id):
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
        if all(info is None or info.state in ("T", "t", "Z", "X") for info in states):
            break
        time.sleep(0.01)
    return list(stopped.values())


def signal_quietly(pid: int, sig: signal.Signals) -> None:
    """Send ``sig``; a process that is gone, or not ours to signal, is not an error."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

__all__ = ["PROC", "RUN_ENV", "ProcInfo", "freeze_run", "kill_run", "processes_of_run", "read_proc", "signal_quietly"]
