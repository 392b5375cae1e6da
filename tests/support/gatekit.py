"""Helpers for the gate modules that fault sessions run (imported inside the session's pytest).

A fault test writes a small gate module into a tmp dir and runs it as a real pytest session
against a real (or fault) server. The gates make the fault themselves (SIGKILL the API
server, SIGSTOP a TP worker) and leave what they saw in ``$FAULT_MARKS`` as JSON files, for
facts that must not go into the public report (pids, the API key) or that the outer test
compares with the report (timestamps, socket addresses). Stdlib and the plugin's /proc reader.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pytest_vllmqual.launch.cleanup.procs import read_proc
from pytest_vllmqual.launch.cleanup.shm import lines_with

PROC = Path("/proc")
SHM = Path("/dev/shm")
TCP_LISTEN = "0A"


def marks_dir() -> Path:
    return Path(os.environ["FAULT_MARKS"])


def mark(name: str, value: Any) -> None:
    """Write one fact for the outer test (atomically: a reader never sees half a file)."""
    directory = marks_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text(json.dumps(value, default=str))
    os.replace(tmp, directory / f"{name}.json")


def alive(pid: int) -> bool:
    info = read_proc(pid)
    return info is not None and not info.gone


def cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (children, grandchildren, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        info = read_proc(int(entry.name))
        if info is None or info.gone:
            continue
        parents.setdefault(info.ppid, []).append(info.pid)
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        for child in parents.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def describe_tree(root: int) -> list[dict[str, Any]]:
    """pid, ppid, session, name and command line of ``root`` and its descendants."""
    rows = []
    for pid in [root, *descendants(root)]:
        info = read_proc(pid)
        if info is None:
            continue
        rows.append({"pid": pid, "ppid": info.ppid, "session": info.session, "name": info.name,
                     "state": info.status, "cmdline": cmdline(pid)[:200]})
    return rows


def wait_for(predicate: Any, timeout_s: float, interval_s: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def tp_workers(root: int) -> list[int]:
    """The TP worker processes under a vLLM API server (``VLLM::Worker_TP<n>``), by rank order."""
    rows = [(read_proc(pid), pid) for pid in descendants(root)]
    workers = [(info.name, pid) for info, pid in rows if info and "Worker" in info.name]
    if not workers:  # process titles not set: fall back to the command line
        workers = [(cmdline(pid), pid) for _info, pid in rows if "Worker" in cmdline(pid)]
    return [pid for _name, pid in sorted(workers)]


def listening_addresses(port: int) -> list[str]:
    """Local addresses of LISTEN sockets on ``port``, from /proc/net/tcp and tcp6."""
    found: list[str] = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, _, port_hex = local.partition(":")
            if state != TCP_LISTEN or int(port_hex, 16) != port:
                continue
            if width == 8:
                octets = [str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)]
                found.append(".".join(octets))
            else:
                found.append(f"ipv6:{address}")
    return found


def shm_files_held_by(pids: list[int]) -> list[str]:
    """Names of /dev/shm files that ``pids`` map or hold open (the run's shared memory).

    A named semaphore is mapped under glibc's temporary name and only then linked to its
    ``sem.*`` name, so mapped inodes are matched to the names in /dev/shm too.
    """
    names: set[str] = set()
    inodes: set[int] = set()
    for pid in pids:
        try:
            maps = (PROC / str(pid) / "maps").read_text()
        except OSError:
            maps = ""
        for line in lines_with(maps, " /dev/shm/"):
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                names.add(parts[5].split("/dev/shm/", 1)[1].removesuffix(" (deleted)"))
                inodes.add(int(parts[4]))
        try:
            fds = list((PROC / str(pid) / "fd").iterdir())
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                names.add(target.split("/dev/shm/", 1)[1].removesuffix(" (deleted)"))
    if inodes:
        names.update(entry.name for entry in os.scandir(SHM) if entry.inode() in inodes)
    return sorted(names)


def run_shm_files(started_at: float) -> list[str]:
    """/dev/shm files of vLLM's naming, Python's shared memory or its semaphores, created since
    ``started_at`` (epoch seconds) and held by no live process: what a finished run left behind.
    A file some process still maps or holds open is that process's (a server something else on the
    machine runs), not a leftover."""
    made = []
    for entry in os.scandir(SHM):
        try:  # its owner may remove a file between the listing and the look
            if entry.name.startswith(("vllm_", "psm_", "sem.mp-")) and entry.stat().st_ctime >= started_at:
                made.append(entry.name)
        except FileNotFoundError:
            continue
    if not made:
        return []
    held = set(shm_files_held_by([int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]))
    return sorted(name for name in made if name not in held and (SHM / name).exists())
