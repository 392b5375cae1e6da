"""A watchdog that kills a run's server when the pytest process that owns it dies.

Fixture teardown does not run when pytest is SIGKILLed, or ended by a timeout that kills
the process. The reaper is a separate process in its own session, started next to the
server: it polls the owner (its pid and start time, so a pid the kernel gave to another
process later does not keep it waiting) and, once the owner is gone, kills every process of the
run (by session and by the ``VLLMQUAL_RUN_ID`` mark), then reclaims the /dev/shm files those
processes held at any time (``shm_ledger``, sampled while it waits), as teardown would. It
imports only the stdlib and psutil (it runs in pytest's interpreter), so it starts in a moment.

Usage: python -m pytest_vllmqual.launch.cleanup.reaper OWNER_PID OWNER_START RUN_ID SESSION_ID STARTED_EPOCH

(``reaper_command`` writes that line; ``OWNER_START`` is ``owner.process_start`` of the owner.)
"""

from __future__ import annotations

import sys
import time

from .owner import owner_alive
from .procs import kill_run, processes_of_run
from .shm import reclaim_run_shm
from .shm_ledger import ShmLedger

_MODULE = "pytest_vllmqual.launch.cleanup.reaper"


def reaper_command(owner_pid: int, owner_start: str, run_id: str, session: int, started_at: float) -> list[str]:
    """The command line that starts this reaper for a run (what ``main`` reads back)."""
    return [sys.executable, "-m", _MODULE, str(owner_pid), owner_start, run_id, str(session), repr(started_at)]


def parse_args(argv: list[str]) -> tuple[int, str, str, int, float]:
    """(owner pid, owner start, run id, session id, started epoch) from the command line."""
    return int(argv[0]), argv[1], argv[2], int(argv[3]), float(argv[4])


def main(argv: list[str]) -> int:
    owner, owner_start, run_id, session, started_at = parse_args(argv)
    ledger = ShmLedger(lambda: [p.pid for p in processes_of_run(run_id, session)]).start()
    while owner_alive(owner, owner_start):
        time.sleep(0.25)
    kill_run(run_id, session, grace_s=3.0, observe=ledger.observe)
    # what teardown would have reclaimed: the run's shm, once nothing holds it
    reclaim_run_shm(run_id, ledger.stop(), started_at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

__all__ = ["main", "owner_alive", "parse_args", "reaper_command"]
