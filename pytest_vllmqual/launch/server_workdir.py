"""The working directory of the server behind an endpoint, where this machine can tell.

A server started by hand reports its model as it was given, often a path relative to the
directory it was started in (``--model fixtures/model/build/tiny-chat``). To know which files
that names, the identity check needs that directory: for an endpoint on loopback it is the
``/proc/PID/cwd`` of the process listening on the endpoint's port, found through the socket's
inode in ``/proc/net/tcp{,6}`` and the process's open file descriptors. Anything this run may
not read (another user's process, no ``/proc``) gives no directory and says why.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ServerDirectory", "endpoint_server_directory", "listening_socket_inodes", "processes_holding"]

_LISTEN = "0A"
_PROC = Path("/proc")


@dataclass(frozen=True)
class ServerDirectory:
    """The server's working directory, or why it is not known from here."""

    path: Path | None
    unknown_reason: str = ""


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listening_socket_inodes(port: int, proc: Path = _PROC) -> set[str]:
    """Inodes of the TCP sockets (IPv4 and IPv6) listening on ``port`` on this machine."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local_port = fields[1].rsplit(":", 1)[-1]
            if int(local_port, 16) == port and fields[9] != "0":
                inodes.add(fields[9])
    return inodes


def processes_holding(inodes: set[str], proc: Path = _PROC) -> list[int]:
    """Pids of the processes this run may inspect that hold one of the sockets ``inodes``."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: list[int] = []
    try:
        entries = [entry for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            fds = os.scandir(os.path.join(entry.path, "fd"))
        except OSError:
            continue  # another user's process, or gone
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in wanted:
                        found.append(int(entry.name))
                        break
                except OSError:
                    continue
    return sorted(found)


def endpoint_server_directory(base_url: str, proc: Path = _PROC) -> ServerDirectory:
    """The working directory of the process serving ``base_url`` when it listens on loopback on
    this machine and this run may read it; otherwise no directory and the reason."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ServerDirectory(None, "the endpoint's port cannot be read from its URL")
    if not _is_loopback(host):
        return ServerDirectory(None, "the endpoint is not on loopback, so its process cannot be inspected from here")
    inodes = listening_socket_inodes(port, proc)
    if not inodes:
        return ServerDirectory(None, f"no listening socket on port {port} is visible in /proc")
    pids = processes_holding(inodes, proc)
    if not pids:
        return ServerDirectory(None, f"the process listening on port {port} cannot be inspected by this user")
    directories: set[str] = set()
    for pid in pids:
        try:
            directories.add(os.readlink(proc / str(pid) / "cwd"))
        except OSError:
            continue
    if len(directories) != 1:
        return ServerDirectory(None, f"the working directory of the process listening on port {port} "
                               + ("cannot be read" if not directories else "is not one directory"))
    return ServerDirectory(Path(directories.pop()))
