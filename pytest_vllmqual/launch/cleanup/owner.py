"""Who owns a container, and when that owner is provably gone.

Every container the docker launcher creates carries its owner in labels: the host, the pid
of the pytest process, and that process's start time (boot id and start ticks, so a pid the
kernel reused later is not mistaken for the owner). Leftover sweeps and the docker reaper
remove a container only when its owner is provably gone; a container of a concurrent run of
the same recipe (a live owner), of another host sharing the daemon, or without owner labels
is never touched.

``process_start`` is the package's one reading of a process's start time, for every owner a
watchdog or reaper polls. It reads field 22 of ``/proc/PID/stat`` (clock ticks since boot)
itself rather than through psutil: psutil's ``create_time`` adds the boot time as the wall
clock puts it now, which moves when the clock is set, so a start written into a label hours
earlier could stop matching a live owner, and its server would be taken for abandoned.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

OWNER_HOST_LABEL = "vllmqual.owner.host"
OWNER_PID_LABEL = "vllmqual.owner.pid"
OWNER_START_LABEL = "vllmqual.owner.start"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot's id: start ticks count from boot, so they name a process only within one boot."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return "unknown-boot"


def process_start(pid: int) -> str | None:
    """``<boot id>/<start ticks>`` of a live process, or None when it is gone (or a zombie):
    with the pid, it names one process for the life of the boot, whatever reuses the pid later."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # after the name, which may hold spaces and parentheses
    # fields[0] is the state (field 3), fields[19] the start time in clock ticks (field 22)
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return f"{boot_id()}/{fields[19]}"


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

__all__ = ["OWNER_HOST_LABEL", "OWNER_PID_LABEL", "OWNER_START_LABEL", "boot_id", "owner_alive", "owner_gone", "owner_labels", "process_start"]
