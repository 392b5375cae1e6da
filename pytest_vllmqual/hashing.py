"""SHA-256 as the package writes it everywhere: lowercase hex, of a file's bytes or of bytes in hand.

Reports name their evidence by content (artifacts, the private server log, a comparison's arm
reports, a probe sidecar), so two places that hash the same file must agree to the byte; one
function reads a file, in chunks so a large log never sits in memory whole. What is hashed as
JSON (a probe, a checkpoint's index, a report held in memory) is written one way, canonical JSON:
keys sorted, so two runs that hold the same values agree to the byte whatever order they were
built in; the same function gives the sorted text a person reads, where only the spacing differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["canonical_json", "canonical_sha256", "sha256_file", "sha256_hex"]

_CHUNK = 1 << 20


def sha256_file(path: Path | str) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_hex(data: bytes | str) -> str:
    """SHA-256 of bytes, or of text encoded as UTF-8."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def canonical_json(value: Any, *, compact: bool = True, ascii_only: bool = True,
                   default: Callable[[Any], Any] | None = None, indent: int | None = None) -> str:
    """``value`` as JSON with its keys sorted: compact (no spaces) for hashing and for the bytes
    sent to a server, or with JSON's usual spacing (``compact=False``, optionally indented) for
    text a person reads. ``ascii_only=False`` keeps non-ASCII characters as they are (a hash
    that has always been taken that way keeps its value); ``default`` renders what JSON cannot."""
    return json.dumps(value, sort_keys=True, separators=(",", ":") if compact else None,
                      ensure_ascii=ascii_only, default=default, indent=indent)


def canonical_sha256(value: Any, *, compact: bool = True, ascii_only: bool = True,
                     default: Callable[[Any], Any] | None = None) -> str:
    """SHA-256 of ``value``'s canonical JSON (``canonical_json``'s choices)."""
    return sha256_hex(canonical_json(value, compact=compact, ascii_only=ascii_only, default=default))
