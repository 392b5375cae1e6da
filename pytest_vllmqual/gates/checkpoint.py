"""Is the model the server reports the checkpoint the recipe pins? The comparison of two model
locations, for the identity check.

A hub id is compared as a name. A local directory is the same checkpoint when it names the same
files: the same directory once normalised (a relative path resolved against the *server's*
working directory, symlinks followed), or a directory with the same content (a copy). Only
different content is a mismatch; a relative path whose base this run does not know, or a
directory it cannot read, is "not checked" with the reason.

The content is compared file by file (every file below the directory, hidden ones left out):
names, sizes and SHA-256 of every byte, read once and then remembered by the file's identity
(``gates.checkpoint_hash``: shards in parallel, a user cache, progress for a large first read,
and each file's raw SHA-256 beside its content digest, the name the model hub gives its bytes).

The content is the model (weights, tokenizer, chat template, configuration), not the stamp its
writer left: a JSON file's top-level ``transformers_version`` (and ``WRITER_KEYS``' other loading flags) and a safetensors header's
``__metadata__`` are left out (a safetensors file is read as its tensor index and its data), and
so is a build's own record (``WRITER_RECORDS``). A conversion by another transformers version
that yields the same tensors is the same content.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .checkpoint_hash import (
    CONTENT_SCHEME,
    SAMPLED_ABOVE_BYTES,
    WRITER_KEYS,
    FileHash,
    ProgressWriter,
    hash_files,
)

__all__ = [
    "CONTENT_SCHEME",
    "SAMPLED_ABOVE_BYTES",
    "WRITER_KEYS",
    "WRITER_RECORDS",
    "FileHash",
    "LocationComparison",
    "ProgressWriter",
    "compare_model_locations",
    "hash_model_directory",
    "is_local_location",
    "model_directory_fingerprint",
    "model_files",
]

WRITER_RECORDS = frozenset({"BUILD_STAMP.json"})
"""Files a model build writes about itself (inputs, timings), not part of the model."""
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


def model_directory_fingerprint(directory: Path, *, progress: ProgressWriter | None = None) -> dict[str, str]:
    """Relative file name -> ``size:sha256`` of its content for every file of the model below
    ``directory`` (symlinks followed, as a hub cache's snapshot links to its blobs; hidden names
    and ``WRITER_RECORDS`` left out; version stamps left out of the content, see the module)."""
    return {name: found.content for name, found in hash_model_directory(directory, progress=progress).items()}


def hash_model_directory(directory: Path, *, progress: ProgressWriter | None = None,
                         use_cache: bool = True) -> dict[str, FileHash]:
    """Relative file name -> its digests (content and raw SHA-256, whether from the hash cache and
    when its bytes were read) for the files :func:`model_directory_fingerprint` names; every byte
    of a file not in the cache is read (``gates.checkpoint_hash``), and ``progress`` is told how
    far a large first read has got."""
    return hash_files(model_files(directory), progress=progress, use_cache=use_cache)


def model_files(directory: Path) -> dict[str, Path]:
    """Relative file name -> path of every file of the model below ``directory``, sorted."""
    out: dict[str, Path] = {}
    for root, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name in WRITER_RECORDS:
                continue
            path = Path(root) / name
            out[path.relative_to(directory).as_posix()] = path
    return out
