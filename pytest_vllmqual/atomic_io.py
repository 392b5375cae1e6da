"""Atomic file writes and the writable-directory check, shared by every writer of the package.

A report, a comparison, an HTML page or a scrubbed junit file is written to a temp file in
the target directory, fsynced and renamed into place, so a partial file never exists; a
failure raises :class:`~pytest_vllmqual.errors.ReportError` naming the path and a fix.
:func:`check_writable_dir` runs before a server starts, so an unwritable reports directory
never costs a cold start.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import ReportError

__all__ = ["check_writable_dir", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]


def check_writable_dir(directory: Path, *, what: str = "reports directory") -> None:
    """Raise ReportError when ``directory`` cannot be created or written, without creating it.

    Run before a server is started: a run whose report cannot be written must not spend a
    cold start first. The nearest existing ancestor decides (``os.access``; as root only a
    read-only file system or a non-directory on the path refuses).
    """
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise ReportError(
            f"the {what} {directory} cannot be created: {existing} is not a directory. "
            "Fix: choose another reports directory (--vllmqual-reports-dir DIR).")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ReportError(
            f"the {what} {directory} is not writable ({existing} does not allow it). "
            f"Fix: make {existing} writable, or choose another reports directory (--vllmqual-reports-dir DIR).")


def _write_hint(exc: OSError, directory: Path) -> str:
    if exc.errno == errno.ENOSPC:
        return f"free space on the device holding {directory}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {directory} writable, or choose another reports directory"
    return f"check that {directory} exists and is writable"


def write_text_atomic(text: str, path: Path, *, what: str = "report") -> Path:
    """Write ``text`` to ``path`` via a temp file, fsync and rename; ReportError names the path."""
    return write_bytes_atomic(text.encode("utf-8"), path, what=what)


def write_bytes_atomic(data: bytes, path: Path, *, what: str = "report") -> Path:
    """Write ``data`` to ``path`` like :func:`write_text_atomic` (a compressed file, say)."""
    path = Path(path)
    directory = path.parent
    tmp_name: str | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
        except OSError:
            return path
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)
        return path
    except OSError as exc:
        raise ReportError(
            f"cannot write the {what} {path}: {exc.strerror or exc}. Fix: {_write_hint(exc, directory)}."
        ) from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass



def write_json_atomic(obj: Any, path: Path, *, what: str = "report") -> Path:
    """``obj`` as indented UTF-8 JSON (one trailing newline), written like :func:`write_text_atomic`."""
    return write_text_atomic(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", Path(path), what=what)
