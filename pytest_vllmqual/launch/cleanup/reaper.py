"""A watchdog that kills a run's server when the pytest process that owns it dies.

Fixture teardown does not run when pytest is SIGKILLed, or ended by a timeout that kills
the process. The reaper is a separate process in its own session, started next to the
server: it polls the owner's pid and, once the owner is gone, kills every process of the
run (by session and by the ``VLLMQUAL_RUN_ID`` mark), then reclaims the /dev/shm files those
processes held at any time (``shm_ledger``, sampled while it waits), as teardown would. It
imports only the stdlib.

Usage: python -m pytest_vllmqual.launch.cleanup.reaper OWNER_PID RUN_ID SESSION_ID STARTED_EPOCH
"""

from __future__ import annotations

import sys
import time

from .procs import kill_run, processes_of_run, read_proc
from .shm import reclaim_run_shm
from .shm_ledger import ShmLedger


def owner_alive(pid: int) -> bool:
    """True while the owner runs; a zombie owner counts as dead."""
    info = read_proc(pid)
    return info is not None and info.state not in ("Z", "X")


def main(argv: list[str]) -> int:
    owner, run_id, session, started_at = int(argv[0]), argv[1], int(argv[2]), float(argv[3])
    ledger = ShmLedger(lambda: [p.pid for p in processes_of_run(run_id, session)]).start()
    while owner_alive(owner):
        time.sleep(0.25)
    kill_run(run_id, session, grace_s=3.0, observe=ledger.observe)
    # what teardown would have reclaimed: the run's shm, once nothing holds it
    reclaim_run_shm(run_id, ledger.stop(), started_at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

__all__ = ["main"]
