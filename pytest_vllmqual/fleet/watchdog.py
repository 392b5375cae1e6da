"""Ends a node's pytest run when the Ray worker that started it is gone.

Ray does not end a task's children when its worker dies uncleanly (the driver SIGKILLed, the
task cancelled with force, the node's raylet killed). So the task starts this small process in
its own session beside the pytest run: it polls the worker (pid and start time, so a reused pid
does not count) and, once the worker is gone, sends the pytest process group SIGTERM (pytest
stops its server and writes what it can), then SIGKILL after a grace period (the plugin's own
reaper then ends the server). It exits as soon as the pytest group is empty.

Run as ``python -m pytest_vllmqual.fleet.watchdog --owner PID --owner-start TICKS --group PGID``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["group_alive", "main", "process_start", "watch"]

POLL_S = 0.5
GRACE_S = 20.0


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), or None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _owner_alive(pid: int, start: str) -> bool:
    return process_start(pid) == start


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


def watch(owner: int, owner_start: str, group: int, *, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> str:
    """Block until the group is empty; returns what ended it (``finished`` or ``owner gone``)."""
    while group_alive(group):
        if not _owner_alive(owner, owner_start):
            _signal_group(group, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while group_alive(group) and time.monotonic() < deadline:
                time.sleep(poll_s / 2)
            _signal_group(group, signal.SIGKILL)
            return "owner gone"
        time.sleep(poll_s)
    return "finished"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_vllmqual.fleet.watchdog")
    parser.add_argument("--owner", type=int, required=True, help="pid of the Ray worker running the task")
    parser.add_argument("--owner-start", required=True, help="its start time in clock ticks")
    parser.add_argument("--group", type=int, required=True, help="process group of the pytest run")
    parser.add_argument("--grace", type=float, default=GRACE_S, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    watch(args.owner, args.owner_start, args.group, grace_s=args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
