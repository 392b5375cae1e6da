"""Is the model the server reports the checkpoint the recipe pins? The comparison of two model
locations, for the identity check.

A hub id is compared as a name. A local directory is the same checkpoint when it names the same
files: the same directory once normalised (a relative path resolved against the *server's*
working directory, symlinks followed), or a directory with the same content (a copy). Only
different content is a mismatch; a relative path whose base this run does not know, or a
directory it cannot read, is "not checked" with the reason.

The content is compared file by file (every file below the directory, hidden ones left out):
names, sizes and SHA-256; a file over ``FULL_HASH_MAX_BYTES`` (a weights shard) is hashed over
its first and last ``SAMPLE_BYTES`` and its size, which tells a different shard from a copy
without reading hundreds of GiB.

The content is the model (weights, tokenizer, chat template, configuration), not the stamp its
writer left: a JSON file's top-level ``transformers_version`` (and ``_WRITER_KEYS``' other loading flags) and a safetensors header's
``__metadata__`` are left out (a safetensors file is read as its tensor index and its data), and
so is a build's own record (``WRITER_RECORDS``). A conversion by another transformers version
that yields the same tensors is the same content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from pytest_vllmqual.hashing import sha256_hex

__all__ = [
    "CONTENT_SCHEME",
    "FULL_HASH_MAX_BYTES",
    "SAMPLE_BYTES",
    "WRITER_RECORDS",
    "LocationComparison",
    "compare_model_locations",
    "is_local_location",
    "model_directory_fingerprint",
]

FULL_HASH_MAX_BYTES = 512 * 1024 * 1024
CONTENT_SCHEME = 2
"""The version of the content rules above; a digest recorded under another version is measured
again (2: a JSON file is hashed as canonical JSON without the writer's keys)."""
"""A file up to this size is hashed whole (a small model's single weights file, about a third of
a second per 270 MB); a larger shard by samples."""
SAMPLE_BYTES = 1024 * 1024
WRITER_RECORDS = frozenset({"BUILD_STAMP.json"})
"""Files a model build writes about itself (inputs, timings), not part of the model."""
_WRITER_KEYS = frozenset({"transformers_version", "is_local", "local_files_only"})
"""Top-level JSON keys a writer stamps (its version, and whether it loaded from a local folder),
not part of the model: transformers 5 writes the last two into ``tokenizer_config.json``."""
_SAFETENSORS_METADATA = "__metadata__"
_HEADER_MAX_BYTES = 100 * 1024 * 1024
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?$")
"""A hub model id: ``name`` or ``namespace/name``; a value with more parts is a path."""


@dataclass(frozen=True)
class LocationComparison:
    """``ok``: True (the same checkpoint), False (different files or another id), None (not
    checked); ``note`` says how it was decided, or why it could not be; ``observable`` is False
    when the answer cannot be had from where this run is (the server's directory is unknown)."""

    ok: bool | None
    note: str = ""
    observable: bool = True
    local: bool = True


def is_local_location(value: str, server_cwd: Path | None = None) -> bool:
    """Whether the server read ``value`` from disk: an absolute, ``./``, ``../`` or ``~`` path, a
    path of more parts than a hub id has, or a relative path that exists in the server's
    directory (vLLM's own rule: an existing directory wins over the hub)."""
    if value.startswith(("/", ".", "~")) or not _HUB_ID.match(value):
        return True
    return server_cwd is not None and (server_cwd / value).is_dir()


def _resolved(value: str, server_cwd: Path | None) -> Path | None:
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return Path(os.path.normpath(path))
    return Path(os.path.normpath(server_cwd / path)) if server_cwd is not None else None


def compare_model_locations(observed: str, expected: str, *, server_cwd: Path | None = None,
                            cwd_unknown_reason: str = "") -> LocationComparison:
    """Compare what the server reports loading (``observed``) with what the launcher asked for or
    the recipe pins (``expected``; absolute when local)."""
    observed_local = is_local_location(observed, server_cwd)
    if observed == expected:
        return LocationComparison(True, local=observed_local)
    if not observed_local and not is_local_location(expected):
        return LocationComparison(False, "a different model id", local=False)
    if not observed_local or not is_local_location(expected):
        return LocationComparison(False, "a hub id against a local directory", local=observed_local)
    mine = _resolved(expected, None)
    theirs = _resolved(observed, server_cwd)
    if theirs is None:
        return LocationComparison(
            None, f"the server reports a relative path and its working directory is not known here"
            f" ({cwd_unknown_reason or 'the run did not start it'})", observable=False)
    if mine is not None and (mine == theirs or os.path.realpath(mine) == os.path.realpath(theirs)):
        return LocationComparison(True, "the same directory")
    return _compare_content(mine, theirs)


def _compare_content(mine: Path | None, theirs: Path) -> LocationComparison:
    if mine is None or not mine.is_dir():
        return LocationComparison(None, "the recipe's model directory cannot be read here", observable=False)
    if not theirs.is_dir():
        return LocationComparison(None, "the server's model directory cannot be read from here", observable=False)
    try:
        expected_files, observed_files = model_directory_fingerprint(mine), model_directory_fingerprint(theirs)
    except OSError as exc:
        return LocationComparison(None, f"the model files cannot be read ({exc.strerror or type(exc).__name__})",
                                  observable=False)
    if not expected_files:
        return LocationComparison(None, "the recipe's model directory holds no files", observable=False)
    if expected_files == observed_files:
        return LocationComparison(True, f"a copy with the same content ({len(expected_files)} files compared)")
    return LocationComparison(False, "different files: " + _difference(expected_files, observed_files))


def _difference(expected: dict[str, str], observed: dict[str, str], limit: int = 3) -> str:
    changed = sorted(name for name in expected.keys() & observed.keys() if expected[name] != observed[name])
    missing = sorted(expected.keys() - observed.keys())
    extra = sorted(observed.keys() - expected.keys())
    parts = []
    for words, names in (("differ", changed), ("missing on the server's side", missing),
                         ("only on the server's side", extra)):
        if names:
            shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
            parts.append(f"{shown} {words if len(names) > 1 or words != 'differ' else 'differs'}")
    return "; ".join(parts)


def model_directory_fingerprint(directory: Path) -> dict[str, str]:
    """Relative file name -> ``size:sha256`` of its content for every file of the model below
    ``directory`` (symlinks followed, as a hub cache's snapshot links to its blobs; hidden names
    and ``WRITER_RECORDS`` left out; version stamps left out of the content, see the module)."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name in WRITER_RECORDS:
                continue
            path = Path(root) / name
            relative = path.relative_to(directory).as_posix()
            out[relative] = _content_digest(path)
    return out


def _content_digest(path: Path) -> str:
    """A file's ``size:sha256``; a config's without its writer's version, a safetensors file's over
    its tensor index (no metadata) and its data."""
    size = path.stat().st_size
    if path.suffix == ".json" and size <= _HEADER_MAX_BYTES:
        return _json_digest(path, size)
    if path.suffix == ".safetensors":
        return _safetensors_digest(path, size)
    return _file_digest(path, size)


def _json_digest(path: Path, size: int) -> str:
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        return _file_digest(path, size)
    for key in _WRITER_KEYS:
        data.pop(key, None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return f"{len(canonical)}:{sha256_hex(canonical)}"


def _safetensors_digest(path: Path, size: int) -> str:
    """The tensor index (names, dtypes, shapes, offsets; sorted, without ``__metadata__``) and the
    data after the header, by the same rule as any file; a file that is not safetensors as bytes."""
    with open(path, "rb") as handle:
        raw = handle.read(8)
        length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        header = handle.read(length) if 0 <= length <= min(_HEADER_MAX_BYTES, size - 8) else b""
    try:
        index = json.loads(header) if header else None
    except (ValueError, UnicodeDecodeError):
        index = None
    if not isinstance(index, dict):
        return _file_digest(path, size)
    index.pop(_SAFETENSORS_METADATA, None)
    digest = hashlib.sha256(json.dumps(index, sort_keys=True, separators=(",", ":")).encode())
    data_size, data = _file_digest(path, size, start=8 + length).split(":", 1)
    digest.update(data.encode())
    return f"{data_size}:{digest.hexdigest()}"


def _file_digest(path: Path, size: int, start: int = 0) -> str:
    """``size:sha256`` of the bytes from ``start``: all of them up to ``FULL_HASH_MAX_BYTES``, else
    the first and last ``SAMPLE_BYTES``."""
    length = size - start
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        if length <= FULL_HASH_MAX_BYTES:
            for block in iter(lambda: handle.read(SAMPLE_BYTES), b""):
                digest.update(block)
        else:
            digest.update(handle.read(SAMPLE_BYTES))
            handle.seek(size - SAMPLE_BYTES)
            digest.update(handle.read(SAMPLE_BYTES))
    return f"{length}:{digest.hexdigest()}"
