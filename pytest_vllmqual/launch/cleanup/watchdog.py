"""The one watchdog: ends what a process leaves behind when that process dies without cleaning up.

Fixture teardown does not run when pytest is SIGKILLed or ended by a timeout that kills the
process, and Ray does not end a task's children when its worker dies uncleanly. So each owner
(a pytest process, a Ray worker) keeps one small process of this module beside it, in its own
session, started with its first registration and serving it for life. Every part that leaves
something behind registers it on the watchdog's pipe, one line each, and says ``done`` when it
has cleaned up itself:

- ``watch run RUN_ID SESSION STARTED_EPOCH``: a local server tree (the subprocess launcher). The
  watchdog samples the /dev/shm names the run's processes hold (``shm_ledger``) while it waits;
- ``watch containers RUN_ID STARTED_EPOCH IPC_HOST DOCKER_HOST``: the docker launcher's containers
  (``IPC_HOST`` 1 or 0; ``DOCKER_HOST`` the engine's address, or ``-`` for the default);
- ``watch group PGID`` (or ``watch PGID``): a process group (a fleet job's pytest run);
- ``watch shm NAME``: a /dev/shm name to reclaim, with the two-scan guard;
- ``done KIND KEY`` (or ``done PGID``): the part cleaned up itself; forget it.

It notices the owner's death two ways: the pipe closes (at once, as the kernel closes a dead
process's files), and the owner's pid and start time stop matching (a poll, in case something
else holds the pipe open). Then it ends what is still registered: a run's processes (by session
and run mark, SIGTERM then SIGKILL) and the shared memory they held; the containers, frozen and
removed; the process groups (SIGTERM so pytest tears down its server, SIGKILL after the grace);
the shm names. It imports only the stdlib and psutil (docker's SDK when a container needs it),
so it starts in a moment.

Usage: python -m pytest_vllmqual.launch.cleanup.watchdog --owner PID --owner-start START [--stdin]
[--watch LINE ...] [--group PGID ...] [--grace S], START being ``procs.process_start(PID)``.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .owner import owner_alive
from .procs import group_alive, kill_run, process_start, processes_of_run, signal_group, terminate_then_kill
from .shm import reclaim_run_shm, reclaim_unheld
from .shm_ledger import ShmLedger

__all__ = ["GROUP_GRACE_S", "MODULE", "RUN_GRACE_S", "WATCHDOG", "Registry", "Watchdog", "main", "serve",
           "watchdog_command"]

MODULE = "pytest_vllmqual.launch.cleanup.watchdog"
POLL_S = 0.25
RUN_GRACE_S = 3.0
"""A dead owner's server gets this long to exit on SIGTERM: nobody waits for its report."""
GROUP_GRACE_S = 20.0
"""A dead worker's pytest gets this long to tear down its server and write what it can."""


@dataclass
class Registry:
    """What one owner left behind, by kind, as its lines said."""

    groups: set[int] = field(default_factory=set)
    runs: dict[str, tuple[int, float, ShmLedger]] = field(default_factory=dict)
    containers: dict[str, tuple[float, bool, str]] = field(default_factory=dict)
    shm: set[str] = field(default_factory=set)

    def empty(self) -> bool:
        return not (self.groups or self.runs or self.containers or self.shm)

    def apply(self, line: str) -> None:
        """One line of the protocol (see the module docstring); a line it cannot read is ignored."""
        words = line.split()
        if len(words) == 2 and words[1].isdigit():  # the fleet's short form: watch PGID / done PGID
            words = [words[0], "group", words[1]]
        if len(words) < 3:
            return
        verb, kind, args = words[0], words[1], words[2:]
        try:
            if verb == "watch":
                self._watch(kind, args)
            elif verb == "done":
                self._done(kind, args[0])
        except (ValueError, IndexError):
            return

    def _watch(self, kind: str, args: list[str]) -> None:
        if kind == "group":
            self.groups.add(int(args[0]))
        elif kind == "run" and args[0] not in self.runs:
            run_id, session = args[0], int(args[1])
            ledger = ShmLedger(lambda: [p.pid for p in processes_of_run(run_id, session)]).start()
            self.runs[run_id] = (session, float(args[2]), ledger)
        elif kind == "containers":
            self.containers[args[0]] = (float(args[1]), args[2] == "1", args[3] if len(args) > 3 else "-")
        elif kind == "shm":
            self.shm.add(args[0])

    def _done(self, kind: str, key: str) -> None:
        if kind == "group" and key.isdigit():
            self.groups.discard(int(key))
        elif kind == "run" and key in self.runs:
            self.runs.pop(key)[2].stop()
        elif kind == "containers":
            self.containers.pop(key, None)
        elif kind == "shm":
            self.shm.discard(key)

    def end_all(self, group_grace_s: float) -> None:
        """The owner is gone: end everything still registered."""
        for run_id, (session, started_at, ledger) in list(self.runs.items()):
            kill_run(run_id, session, grace_s=RUN_GRACE_S, observe=ledger.observe)
            reclaim_run_shm(run_id, ledger.stop(), started_at)  # what teardown would have reclaimed
        for run_id, (started_at, ipc_host, docker_host) in list(self.containers.items()):
            from pytest_vllmqual.launch.docker.reaper import reap_run_containers  # docker's SDK only now

            reap_run_containers(run_id, started_at, ipc_host=ipc_host, docker_host=None if docker_host == "-" else docker_host)
        groups = {g for g in self.groups if group_alive(g)}

        def send(sig: signal.Signals) -> None:
            for group in groups:
                signal_group(group, sig)

        if groups:
            terminate_then_kill(send, lambda: any(group_alive(g) for g in groups), grace_s=group_grace_s,
                                poll_s=POLL_S / 2)
        if self.shm:
            reclaim_unheld(None, self.shm)


def _read_lines(fd: int, pending: bytearray, registry: Registry) -> bool:
    """Apply what the owner wrote (whole lines only); False when the pipe is closed (the owner is gone)."""
    chunk = os.read(fd, 4096)
    if not chunk:
        return False
    pending += chunk
    *lines, rest = bytes(pending).split(b"\n")
    pending[:] = rest
    for line in lines:
        registry.apply(line.decode(errors="replace"))
    return True


def serve(owner: int, owner_start: str, registry: Registry, *, commands_fd: int | None = None,
          poll_s: float = POLL_S, group_grace_s: float = GROUP_GRACE_S) -> str:
    """Block until the owner is gone, then end what is registered; without a pipe, also return
    once nothing is left to watch. What ended it: ``owner gone`` or ``finished``."""
    pending = bytearray()
    while True:
        if commands_fd is not None:
            ready, _, _ = select.select([commands_fd], [], [], poll_s)
            if ready and not _read_lines(commands_fd, pending, registry):
                break
        else:
            time.sleep(poll_s)
        registry.groups.intersection_update({g for g in registry.groups if group_alive(g)})
        if not owner_alive(owner, owner_start):
            break
        if commands_fd is None and registry.empty():
            return "finished"
    registry.end_all(group_grace_s)
    return "owner gone"


def watchdog_command(owner: int, owner_start: str) -> list[str]:
    """The one command line that starts a watchdog (registrations then arrive on its stdin)."""
    return [sys.executable, "-m", MODULE, "--owner", str(owner), "--owner-start", owner_start, "--stdin"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--owner", type=int, required=True, help="pid of the process whose leftovers it ends")
    parser.add_argument("--owner-start", required=True, help="its start time, as procs.process_start gives it")
    parser.add_argument("--watch", action="append", default=[], help="a registration line, as on stdin")
    parser.add_argument("--group", type=int, action="append", default=[], help="a process group to watch")
    parser.add_argument("--stdin", action="store_true", help="read registration lines from stdin")
    parser.add_argument("--grace", type=float, default=GROUP_GRACE_S, help="seconds between SIGTERM and SIGKILL of a group")
    args = parser.parse_args(argv)
    registry = Registry()
    for line in [*args.watch, *(f"watch group {g}" for g in args.group)]:
        registry.apply(line)
    serve(args.owner, args.owner_start, registry, commands_fd=sys.stdin.fileno() if args.stdin else None,
          group_grace_s=args.grace)
    return 0


class Watchdog:
    """The calling process's one watchdog process, started with its first registration.

    The pipe's write end is close-on-exec and held by this process alone, so its death closes
    the pipe and the watchdog ends what is registered. A forked child is another owner: it
    starts its own watchdog. ``proc`` is the watchdog process (None until the first line).
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.owner: int | None = None
        self.lock = threading.Lock()

    def _running(self) -> subprocess.Popen[bytes]:
        me = os.getpid()
        if self.proc is None or self.owner != me or self.proc.poll() is not None:
            package_parent = str(Path(__file__).resolve().parents[3])
            env = {**os.environ, "PYTHONPATH": package_parent + os.pathsep + os.environ.get("PYTHONPATH", "")}
            self.proc = subprocess.Popen(watchdog_command(me, process_start(me) or "unknown"), stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                         env=env)
            self.owner = me
        return self.proc

    @property
    def pid(self) -> int:
        """The watchdog's pid (started if need be): a launcher leaves it out of its run's processes."""
        with self.lock:
            return self._running().pid

    def tell(self, *words: object) -> None:
        """One registration line (restarts a watchdog that died; it then learns only later lines)."""
        line = (" ".join(str(w) for w in words) + "\n").encode()
        with self.lock:
            for _ in range(2):
                proc = self._running()
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(line)
                    proc.stdin.flush()
                    return
                except (BrokenPipeError, OSError):
                    proc.kill()
                    proc.wait(timeout=10)

    def watch_run(self, run_id: str, session: int, started_at: float) -> None:
        self.tell("watch", "run", run_id, session, repr(started_at))

    def watch_containers(self, run_id: str, started_at: float, *, ipc_host: bool, docker_host: str | None) -> None:
        self.tell("watch", "containers", run_id, repr(started_at), "1" if ipc_host else "0", docker_host or "-")

    def watch_group(self, pgid: int) -> None:
        self.tell("watch", "group", pgid)

    def done(self, kind: str, key: object) -> None:
        self.tell("done", kind, key)


WATCHDOG = Watchdog()
"""This process's watchdog: every launcher and fleet job of the process registers with it."""


if __name__ == "__main__":
    raise SystemExit(main())
