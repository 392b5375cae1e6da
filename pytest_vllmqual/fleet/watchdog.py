"""Ends a node's pytest runs when the Ray worker that started them is gone.

Ray does not end a task's children when its worker dies uncleanly (the driver SIGKILLed, the
task cancelled with force, the node's raylet killed). So each Ray worker keeps one small
process of this module beside it, in its own session, for as long as the worker lives (Ray
reuses a worker for task after task: one watchdog per worker, not one per job, so a job start
costs one process spawn, not two). The worker tells it on a pipe which pytest process groups
are running (``watch PGID`` / ``done PGID``, a line each). It notices the worker's death two
ways: the pipe closes (at once, as the kernel closes a dead process's files), and the worker's
pid and start time stop matching (a poll, in case something else holds the pipe open). Then it
sends every group it watches SIGTERM (pytest stops its server and writes what it can), then
SIGKILL after a grace period (the plugin's own reaper then ends the server), and exits.

Run as ``python -m pytest_vllmqual.fleet.watchdog --owner PID --owner-start START [--group PGID]``, where
START is ``launch.cleanup.owner.process_start(PID)`` (the one owner of a process's start time).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time
from collections.abc import Sequence

from pytest_vllmqual.launch.cleanup.owner import owner_alive

__all__ = ["group_alive", "main", "watch"]

POLL_S = 0.5
GRACE_S = 20.0


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_groups(groups: set[int], poll_s: float, grace_s: float) -> None:
    for group in groups:
        _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(poll_s / 2)
    for group in groups:
        _signal_group(group, signal.SIGKILL)


def _read_commands(fd: int, pending: bytearray, groups: set[int]) -> bool:
    """Apply what the owner wrote (whole lines only); False when the pipe is closed (the owner is gone)."""
    chunk = os.read(fd, 4096)
    if not chunk:
        return False
    pending += chunk
    *lines, rest = bytes(pending).split(b"\n")
    pending[:] = rest
    for line in lines:
        verb, _, value = line.decode(errors="replace").strip().partition(" ")
        if value.isdigit():
            (groups.add if verb == "watch" else groups.discard)(int(value))
    return True


def watch(owner: int, owner_start: str, groups: set[int], *, commands_fd: int | None = None,
          poll_s: float = POLL_S, grace_s: float = GRACE_S) -> str:
    """Block until the owner is gone (then end ``groups``), or, without a command pipe, until they are empty.

    Returns what ended it: ``finished`` (nothing left to watch and no pipe to wait on) or ``owner gone``.
    """
    pending = bytearray()
    while True:
        if commands_fd is not None:
            ready, _, _ = select.select([commands_fd], [], [], poll_s)
            if ready and not _read_commands(commands_fd, pending, groups):
                break
        else:
            time.sleep(poll_s)
        groups.intersection_update({g for g in groups if group_alive(g)})
        if not owner_alive(owner, owner_start):
            break
        if commands_fd is None and not groups:
            return "finished"
    _end_groups(groups, poll_s, grace_s)
    return "owner gone"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_vllmqual.fleet.watchdog")
    parser.add_argument("--owner", type=int, required=True, help="pid of the Ray worker running the task")
    parser.add_argument("--owner-start", required=True, help="its start time, as launch.cleanup.owner.process_start gives it")
    parser.add_argument("--group", type=int, action="append", default=[],
                        help="a process group to watch from the start (more arrive as 'watch PGID' on stdin)")
    parser.add_argument("--stdin", action="store_true", help="read 'watch PGID' / 'done PGID' lines from stdin")
    parser.add_argument("--grace", type=float, default=GRACE_S, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    watch(args.owner, args.owner_start, set(args.group), commands_fd=sys.stdin.fileno() if args.stdin else None,
          grace_s=args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
