"""Who owns a container, and when that owner is provably gone.

Every container the docker launcher creates carries its owner in labels: the host, the pid
of the pytest process, and that process's start time (boot id and start ticks, so a pid the
kernel reused later is not mistaken for the owner). Leftover sweeps and the docker reaper
remove a container only when its owner is provably gone; a container of a concurrent run of
the same recipe (a live owner), of another host sharing the daemon, or without owner labels
is never touched.

``process_start`` (in ``procs``, the one module that reads the process table) is the package's
one reading of a process's start time, for every owner the watchdog polls: the kernel's start
ticks, which setting the wall clock does not move (``procs`` says why not psutil's).
"""

from __future__ import annotations

import os
import socket

from .procs import BOOT_ID, boot_id, process_start

OWNER_HOST_LABEL = "vllmqual.owner.host"
OWNER_PID_LABEL = "vllmqual.owner.pid"
OWNER_START_LABEL = "vllmqual.owner.start"


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """The owner labels for a container started by ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return {
        OWNER_HOST_LABEL: socket.gethostname(),
        OWNER_PID_LABEL: str(pid),
        OWNER_START_LABEL: process_start(pid) or "unknown",
    }


def owner_alive(pid: int, start: str) -> bool:
    """True while the process ``pid`` that started at ``start`` still runs."""
    return process_start(pid) == start


def owner_gone(labels: dict[str, str]) -> str | None:
    """Why the container's owner is provably gone, or None when it may still run.

    Provably gone means: the owner ran on this host, and either this host has rebooted since,
    or no process with its pid runs, or the process with its pid started at another time.
    """
    host = labels.get(OWNER_HOST_LABEL)
    pid_text = labels.get(OWNER_PID_LABEL, "")
    start = labels.get(OWNER_START_LABEL, "")
    if not host or not pid_text.isdigit() or "/" not in start:
        return None  # no owner labels (an older tool, or not ours): nothing is provable
    if host != socket.gethostname():
        return None  # another host shares this daemon: its processes cannot be seen from here
    owner_boot = start.split("/", 1)[0]
    if owner_boot != boot_id():
        return f"its owner ran before this host rebooted (pid {pid_text})"
    current = process_start(int(pid_text))
    if current is None:
        return f"its owner pid {pid_text} is not running"
    if current != start:
        return f"pid {pid_text} now belongs to a process that started later than its owner"
    return None

__all__ = ["BOOT_ID", "OWNER_HOST_LABEL", "OWNER_PID_LABEL", "OWNER_START_LABEL", "boot_id", "owner_alive", "owner_gone", "owner_labels", "process_start"]
