"""What the scrubber counts as private without being told: decided by what is this machine's or
its environment's, never by a list of public names.

A name is private when it is one of this machine's names, a value (or an identifier-shaped
part of one) of the environment the server inherits or of the recipe's env, a name the run
registered (the endpoint's host), or a name under a suffix reserved for private networks
(``.internal``, ``.local``, ``.lan``, ...), which no public host can carry. Any other name
(a documentation link's host, a hub's) is public text and is left as written.
"""

from __future__ import annotations

import functools
import os
import re
import socket

__all__ = [
    "LOOPBACK_NAMES",
    "MIN_INHERITED_LEN",
    "PRIVATE_NAME_SOURCE",
    "PRIVATE_SUFFIXES",
    "RUN_BOOKKEEPING",
    "inherited_identifiers",
    "is_loopback_name",
    "is_run_bookkeeping",
    "machine_names",
]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names of the loopback interface: like 127.0.0.1, they name no machine."""

PRIVATE_SUFFIXES = ("internal", "local", "localdomain", "lan", "intranet", "intra", "corp", "home", "private",
                    "home.arpa", "svc", "cluster.local")
"""Suffixes reserved or used only for private networks: a name under one is an operator's host
wherever it appears, learned or not (``ip-10-0-3-17.ec2.internal``, ``registry.corp.internal``)."""

PRIVATE_NAME_SOURCE = (
    r"(?<![\w.-])(?P<fqdn>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:"
    + "|".join(re.escape(s) for s in sorted(PRIVATE_SUFFIXES, key=len, reverse=True)) + r"))"
    r"(?![\w-]|\.[\w-])"
)

RUN_BOOKKEEPING = ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_")
"""Variables pytest sets about the test running now (its node id, the worker's name): the report
names those on purpose, so they are not private values."""

MIN_INHERITED_LEN = 4
_PART_SPLIT = re.compile(r"[\s,;|=\[\]()<>\"']+")
_IDENTIFIER_MARK = re.compile(r"[\d._:/@-]")
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_PLAIN_WORDS = frozenset(
    {"true", "false", "none", "null", "auto", "spawn", "fork", "forkserver", "info", "debug", "warning", "error",
     "yes", "no", "on", "off", "cpu", "cuda", "gpu", "fp8", "bf16", "fp16", "float16", "bfloat16", "float32",
     "half", "native", "utf-8", "utf8"}
)


def is_loopback_name(name: str) -> bool:
    lowered = name.lower().rstrip(".")
    return lowered in LOOPBACK_NAMES or lowered.startswith("localhost.")


def is_run_bookkeeping(name: str) -> bool:
    return name.startswith(RUN_BOOKKEEPING)


def inherited_identifiers(value: str) -> set[str]:
    """The parts of an inherited environment value that name something: the whole value and each
    piece of it (a path list split at ``os.pathsep``) that carries an identifier's marks (a digit,
    dot, colon, slash, ``@``, dash or underscore: ``db7.prod``, ``node-17``, ``/srv/models``).
    Plain words (``less``, ``production``) and constant names (``FLASH_ATTN``) are settings:
    scrubbing them would mangle the report's own words."""
    text = value.strip()
    pieces = [text]
    if os.pathsep in text and all(p.startswith(("/", "~")) for p in text.split(os.pathsep) if p):
        pieces += text.split(os.pathsep)
    pieces += [part.strip(".:/") for part in _PART_SPLIT.split(text)]
    return {piece for piece in pieces if _names_something(piece)}


_SYSTEM_DIRS = frozenset(
    f"{prefix}/{leaf}" for prefix in ("", "/usr", "/usr/local") for leaf in ("bin", "sbin", "lib", "lib64", "libexec",
                                                                           "include", "share", "games")
) | {"/usr", "/usr/local", "/etc", "/opt", "/tmp", "/var", "/srv", "/home", "/root", "/snap/bin"}
"""Directories every Linux machine has (a PATH lists them): naming one tells nothing about this
machine, and scrubbing it would turn ``/nonexistent/bin/vllm-serve`` into nonsense."""


def _names_something(piece: str) -> bool:
    if piece.rstrip("/") in _SYSTEM_DIRS:
        return False
    return (len(piece) >= MIN_INHERITED_LEN and any(c.isalpha() for c in piece)
            and _IDENTIFIER_MARK.search(piece) is not None and not _CONSTANT_NAME.fullmatch(piece)
            and piece.lower() not in _PLAIN_WORDS)


@functools.lru_cache(maxsize=1)
def machine_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(host names, addresses) of this machine: gethostname, getfqdn and their aliases, and the
    addresses they resolve to. Looked up once per process (getfqdn may ask DNS)."""
    names: set[str] = set()
    addresses: set[str] = set()
    host = socket.gethostname()
    if host:
        names.add(host)
    try:
        fqdn = socket.getfqdn()
    except OSError:
        fqdn = ""
    if fqdn:
        names.add(fqdn)
    try:
        primary, aliases, addrs = socket.gethostbyname_ex(host)
        names.update([primary, *aliases])
        addresses.update(addrs)
    except OSError:
        pass
    try:
        for info in socket.getaddrinfo(host, None):
            addresses.add(str(info[4][0]))
    except OSError:
        pass
    names = {n for n in names if n and not is_loopback_name(n)}
    addresses = {a for a in addresses if not a.startswith("127.") and a != "::1"}
    return tuple(sorted(names)), tuple(sorted(addresses))
