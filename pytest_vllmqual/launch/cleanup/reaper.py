"""Deprecated (kept for a release): the local reaper's command line, now the one watchdog's.

``python -m pytest_vllmqual.launch.cleanup.reaper OWNER_PID OWNER_START RUN_ID SESSION_ID STARTED_EPOCH``
starts ``launch.cleanup.watchdog`` with that run registered: once the owner is gone it kills every
process of the run (by session and by the ``VLLMQUAL_RUN_ID`` mark) and reclaims the /dev/shm
files they held. The package itself registers runs with its process's one watchdog instead.
"""

from __future__ import annotations

import sys

from . import watchdog
from .owner import owner_alive

_MODULE = "pytest_vllmqual.launch.cleanup.reaper"


def reaper_command(owner_pid: int, owner_start: str, run_id: str, session: int, started_at: float) -> list[str]:
    """The old command line for a run (what ``main`` reads back)."""
    return [sys.executable, "-m", _MODULE, str(owner_pid), owner_start, run_id, str(session), repr(started_at)]


def parse_args(argv: list[str]) -> tuple[int, str, str, int, float]:
    """(owner pid, owner start, run id, session id, started epoch) from the old command line."""
    return int(argv[0]), argv[1], argv[2], int(argv[3]), float(argv[4])


def main(argv: list[str]) -> int:
    owner, owner_start, run_id, session, started_at = parse_args(argv)
    return watchdog.main(["--owner", str(owner), "--owner-start", owner_start,
                          "--watch", f"watch run {run_id} {session} {started_at!r}"])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

__all__ = ["main", "owner_alive", "parse_args", "reaper_command"]
