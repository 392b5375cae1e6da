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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pytest_vllmqual.launch.cleanup.procs import PROC, listening_socket_inodes, process_cwd, processes_holding

__all__ = ["ServerDirectory", "endpoint_server_directory", "listening_socket_inodes", "processes_holding"]

_PROC = PROC


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
        directory = process_cwd(pid, proc)
        if directory is not None:
            directories.add(directory)
    if len(directories) != 1:
        return ServerDirectory(None, f"the working directory of the process listening on port {port} "
                               + ("cannot be read" if not directories else "is not one directory"))
    return ServerDirectory(Path(directories.pop()))
