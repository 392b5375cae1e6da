"""SHA-256 as the package writes it everywhere: lowercase hex, of a file's bytes or of bytes in hand.

Reports name their evidence by content (artifacts, the private server log, a comparison's arm
reports, a probe sidecar), so two places that hash the same file must agree to the byte; one
function reads a file, in chunks so a large log never sits in memory whole.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file", "sha256_hex"]

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
