"""Deprecated (kept for a release): the fleet's watchdog command line, now the one watchdog's.

``python -m pytest_vllmqual.fleet.watchdog --owner PID --owner-start START [--group PGID] [--stdin]
[--grace S]`` runs ``launch.cleanup.watchdog`` with the same arguments: it ends the watched process
groups (SIGTERM, then SIGKILL after the grace) when the Ray worker that started them is gone.
"""

from __future__ import annotations

import sys

from pytest_vllmqual.launch.cleanup.procs import group_alive
from pytest_vllmqual.launch.cleanup.watchdog import main

__all__ = ["group_alive", "main"]


if __name__ == "__main__":
    sys.exit(main())
