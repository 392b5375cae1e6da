"""The bytes behind a content pin: every file of a model folder hashed whole, shards in parallel,
with a cache so a second run reads nothing.

Each file gets two digests:

- its *content* digest (``size:sha256``), what a pin compares: a JSON file as canonical JSON
  without its writer's keys, a safetensors file as its tensor index (without ``__metadata__``)
  and every byte of its data, any other file as its bytes (the rules are ``gates.checkpoint``'s);
- its *raw* SHA-256, of the file's bytes as they are on disk. The model hub names each file it
  stores through Git LFS by this SHA-256 (the ``oid`` of its LFS pointer), and a hub cache keeps
  it as ``blobs/<sha256>``, so an operator can check a folder against the hub offline by
  comparing the two.

Every byte is read (a pin that reads samples lets a shard corrupted in its middle pass). Files
are hashed in parallel threads (SHA-256 releases the interpreter lock while it works on a large
block); a large safetensors shard, which needs both digests, feeds its two hashers from two
threads. A file of at least ``CACHE_MIN_BYTES`` is remembered in the user cache
(``$VLLMQUAL_CACHE_DIR``, else ``~/.cache/vllmqual``, under ``checkpoint-hashes/``) by its
identity on this machine: device, inode, size, and modification and change times to the
nanosecond. Writing a file, replacing it, or changing its metadata changes that identity, so a
cached digest is used only for the very file it was measured on; the record says which files
came from the cache and when they were read. What the cache cannot see is a change below the
file system (a disk's bit rot that leaves the times alone): remove the cache folder to read
every byte again.

The first time a large folder is hashed, a progress line with an estimate of the time left goes
to the caller's writer every few seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_json_atomic
from pytest_vllmqual.clock import utc_now
from pytest_vllmqual.errors import ReportError
from pytest_vllmqual.hashing import canonical_json, canonical_sha256, sha256_hex
from pytest_vllmqual.layout import cache_dir

__all__ = [
    "CACHE_FOLDER",
    "CACHE_MIN_BYTES",
    "CONTENT_SCHEME",
    "PROGRESS_MIN_BYTES",
    "SAMPLED_ABOVE_BYTES",
    "FileHash",
    "HashProgress",
    "ProgressWriter",
    "file_hash",
    "hash_files",
    "hash_workers",
]

CONTENT_SCHEME = 3
"""The version of the content rules; a digest recorded under another version is measured again
(2: a JSON file as canonical JSON without its writer's keys; 3: every byte of a file over 512 MiB,
which 2 read as its first and last MiB. A file up to 512 MiB has the same digest under 2 and 3,
so a pin of a small model stays valid)."""
SAMPLED_ABOVE_BYTES = 512 * 1024 * 1024
"""Content rules 2 read a file larger than this by its first and last MiB (rules 3 read it whole)."""
CACHE_FOLDER = "checkpoint-hashes"
CACHE_MIN_BYTES = 1024 * 1024
"""A smaller file is read again each time (well under a millisecond)."""
PROGRESS_MIN_BYTES = 1024**3
"""Progress lines are written when at least this much is read (about a second's work)."""
PROGRESS_EVERY_S = 5.0
BLOCK_BYTES = 4 * 1024 * 1024
"""Read size: the interpreter's work per block is nothing against SHA-256's (about 3 ms a block
at 1.3 GB/s), and SHA-256 releases the interpreter lock while it works on it."""
MAX_WORKERS = 8
JSON_MAX_BYTES = 100 * 1024 * 1024
"""A JSON file (or a safetensors header) larger than this is hashed as bytes."""
WRITER_KEYS = frozenset({"transformers_version", "is_local", "local_files_only"})
"""Top-level JSON keys a writer stamps (its version, and whether it loaded from a local folder),
not part of the model: transformers 5 writes the last two into ``tokenizer_config.json``."""
_SAFETENSORS_METADATA = "__metadata__"

ProgressWriter = Callable[[str], None]


@dataclass(frozen=True)
class FileHash:
    """One file's digests: ``content`` (``size:sha256`` by the content rules, what a pin
    compares), ``sha256`` (of its raw bytes, the hub's LFS name for it), when its bytes were read
    (``hashed_at``, UTC) and whether this run took them from the cache instead of reading."""

    size: int
    content: str
    sha256: str
    hashed_at: str
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "content": self.content, "sha256": self.sha256, "hashed_at": self.hashed_at,
                "from_cache": self.from_cache}


def hash_workers(files: int) -> int:
    """Threads for ``files`` files: one per core this process may run on, at most
    ``MAX_WORKERS`` (hashing is bound by the CPU or the disk; more threads than cores only
    interleave)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, cores, MAX_WORKERS))


# -- one file -------------------------------------------------------------------------------


def _rule(path: Path, size: int) -> str:
    if path.suffix == ".json" and size <= JSON_MAX_BYTES:
        return "json"
    return "safetensors" if path.suffix == ".safetensors" else "bytes"


def file_hash(path: Path, *, counter: Callable[[int], None] | None = None) -> FileHash:
    """``path``'s digests, read now (``counter`` is told each block's size as it is read)."""
    size = os.stat(path).st_size
    hashed_at = utc_now()
    rule = _rule(path, size)
    if rule == "json":
        content, raw = _json_digests(path)
    elif rule == "safetensors":
        content, raw = _safetensors_digests(path, size, counter)
    else:
        content, raw = _bytes_digests(path, counter)
    if rule == "json" and counter is not None:
        counter(size)
    return FileHash(size, content, raw, hashed_at)


def _bytes_digests(path: Path, counter: Callable[[int], None] | None) -> tuple[str, str]:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        length = _feed(handle, (digest,), counter)
    return f"{length}:{digest.hexdigest()}", digest.hexdigest()


def _json_digests(path: Path) -> tuple[str, str]:
    raw = path.read_bytes()
    raw_sha = sha256_hex(raw)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        return f"{len(raw)}:{raw_sha}", raw_sha
    for key in WRITER_KEYS:
        data.pop(key, None)
    canonical = canonical_json(data, ascii_only=False).encode()
    return f"{len(canonical)}:{sha256_hex(canonical)}", raw_sha


def _safetensors_digests(path: Path, size: int, counter: Callable[[int], None] | None) -> tuple[str, str]:
    """The tensor index (names, dtypes, shapes, offsets; sorted, without ``__metadata__``) and
    every byte of the data after the header; a file that is not safetensors as bytes."""
    raw = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        prefix = handle.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
        header = handle.read(length) if 0 <= length <= min(JSON_MAX_BYTES, size - 8) else b""
        try:
            index = json.loads(header) if header else None
        except (ValueError, UnicodeDecodeError):
            index = None
        if not isinstance(index, dict):
            handle.seek(0)
            data = hashlib.sha256()
            total = _feed(handle, (data,), counter)
            return f"{total}:{data.hexdigest()}", data.hexdigest()
        raw.update(prefix + header)
        if counter is not None:
            counter(8 + length)
        data = hashlib.sha256()
        data_size = _feed(handle, (data, raw), counter)
    index.pop(_SAFETENSORS_METADATA, None)
    content = hashlib.sha256(canonical_json(index).encode())
    content.update(data.hexdigest().encode())
    return f"{data_size}:{content.hexdigest()}", raw.hexdigest()


def _feed(handle: Any, digests: tuple[Any, ...], counter: Callable[[int], None] | None) -> int:
    """Read ``handle`` to its end into every digest; a second digest is fed from a thread of its
    own, so a shard that needs two digests takes the time of one where a core is free."""
    buffers = (bytearray(BLOCK_BYTES), bytearray(BLOCK_BYTES))
    total = 0
    with contextlib.ExitStack() as stack:
        helper = stack.enter_context(ThreadPoolExecutor(1)) if len(digests) > 1 else None
        pending: Future[None] | None = None
        turn = 0
        while True:
            buffer = buffers[turn]
            count = handle.readinto(buffer)
            if not count:
                break
            block = memoryview(buffer)[:count]
            digests[0].update(block)
            if pending is not None:
                pending.result()  # the helper is done with the other buffer before it is read into again
            if helper is not None:
                pending = helper.submit(_update_all, digests[1:], block)
            total += count
            if counter is not None:
                counter(count)
            turn = 1 - turn
        if pending is not None:
            pending.result()
    return total


def _update_all(digests: tuple[Any, ...], block: memoryview) -> None:
    for digest in digests:
        digest.update(block)


# -- the cache ------------------------------------------------------------------------------


def _identity(stat: os.stat_result, rule: str) -> dict[str, int | str]:
    return {"device": stat.st_dev, "inode": stat.st_ino, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "ctime_ns": stat.st_ctime_ns, "rule": rule, "scheme": CONTENT_SCHEME}


def _entry_path(identity: Mapping[str, int | str]) -> Path:
    key = canonical_sha256(identity, compact=False)
    return cache_dir() / CACHE_FOLDER / key[:2] / f"{key}.json"


def _cached(identity: Mapping[str, int | str]) -> FileHash | None:
    """The entry for this very file, or None (none, another file's, or unreadable)."""
    try:
        entry = json.loads(_entry_path(identity).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("identity") != dict(identity):
        return None
    content, raw, at = entry.get("content"), entry.get("sha256"), entry.get("hashed_at")
    if not (isinstance(content, str) and isinstance(raw, str) and isinstance(at, str)):
        return None
    return FileHash(int(identity["size"]), content, raw, at, from_cache=True)


def _remember(identity: Mapping[str, int | str], found: FileHash) -> None:
    """Write the entry atomically (two processes at once each write a whole file, and the last
    rename wins with the same digests); a cache that cannot be written costs only the next read."""
    entry = {"identity": dict(identity), "content": found.content, "sha256": found.sha256,
             "hashed_at": found.hashed_at}
    with contextlib.suppress(OSError, ReportError):
        write_json_atomic(entry, _entry_path(identity), what="checkpoint hash cache entry")


def _hash_and_remember(path: Path, identity: Mapping[str, int | str] | None,
                       counter: Callable[[int], None]) -> FileHash:
    found = file_hash(path, counter=counter)
    if identity is not None:
        after = _identity(os.stat(path), str(identity["rule"]))
        if after == identity and found.size == identity["size"]:
            _remember(identity, found)  # a file that changed while it was read is not remembered
    return found


# -- a folder -------------------------------------------------------------------------------


class HashProgress:
    """Bytes read so far, from every worker thread, and the lines that tell the caller."""

    def __init__(self, total: int, files: int, cached: int, write: ProgressWriter | None,
                 every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.files, self.cached = total, files, cached
        self.write = write if write is not None and total >= PROGRESS_MIN_BYTES else None
        self.every_s = every_s
        self.done = 0
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count

    def line(self) -> str:
        """``hashed 1,234.5/5,678.9 MiB (22%), 310 MiB/s, ~14 s left``."""
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        left = f"~{(self.total - self.done) / rate:,.0f} s left" if rate > 0 else "time left not known yet"
        percent = 100 * self.done / self.total if self.total else 100
        return (f"checkpoint: hashed {self.done / 2**20:,.1f}/{self.total / 2**20:,.1f} MiB ({percent:.0f}%), "
                f"{rate / 2**20:,.0f} MiB/s, {left}")

    def begin(self) -> None:
        if self.write is not None:
            self.write(f"checkpoint: reading every byte of {self.files} model file(s), "
                       f"{self.total / 2**30:,.2f} GiB, for the content pin ({self.cached} from the hash cache); "
                       f"a later run with the same files reads none")

    def tick(self) -> None:
        if self.write is not None:
            self.write(self.line())

    def end(self) -> None:
        if self.write is not None:
            elapsed = self.clock() - self.started
            self.write(f"checkpoint: hashed {self.total / 2**20:,.1f} MiB in {elapsed:.1f} s "
                       f"({self.total / 2**20 / max(elapsed, 1e-9):,.0f} MiB/s)")


def hash_files(paths: Mapping[str, Path], *, progress: ProgressWriter | None = None,
               use_cache: bool = True, workers: int | None = None,
               every_s: float = PROGRESS_EVERY_S) -> dict[str, FileHash]:
    """Name -> digests of each file in ``paths``: from the cache where the file is the one that
    was measured, else read whole, in parallel; progress lines for a large first read."""
    out: dict[str, FileHash] = {}
    todo: dict[str, tuple[Path, dict[str, int | str] | None]] = {}
    for name, path in paths.items():
        stat = os.stat(path)
        identity = _identity(stat, _rule(path, stat.st_size)) if use_cache and stat.st_size >= CACHE_MIN_BYTES else None
        found = _cached(identity) if identity is not None else None
        if found is not None:
            out[name] = found
        else:
            todo[name] = (path, identity)
    if todo:
        total = sum(os.stat(path).st_size for path, _ in todo.values())
        meter = HashProgress(total, len(todo), len(out), progress, every_s)
        out.update(_hash_in_parallel(todo, meter, workers or hash_workers(len(todo))))
    return {name: out[name] for name in paths}


def _hash_in_parallel(todo: Mapping[str, tuple[Path, dict[str, int | str] | None]], meter: HashProgress,
                      workers: int) -> dict[str, FileHash]:
    meter.begin()
    with ThreadPoolExecutor(workers, thread_name_prefix="vllmqual-hash") as pool:
        futures = {pool.submit(_hash_and_remember, path, identity, meter.add): name
                   for name, (path, identity) in _largest_first(todo)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=max(meter.every_s, 0.01), return_when=FIRST_EXCEPTION)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:
                for other in pending:
                    other.cancel()
                failed.result()  # raises the file's error (an unreadable file)
            if pending:
                meter.tick()
    meter.end()
    return {name: future.result() for future, name in futures.items()}


def _largest_first(todo: Mapping[str, tuple[Path, Any]]) -> Iterator[tuple[str, tuple[Path, Any]]]:
    """The largest files start first, so no thread is left with a big shard at the end."""
    return iter(sorted(todo.items(), key=lambda item: -os.stat(item[1][0]).st_size))
