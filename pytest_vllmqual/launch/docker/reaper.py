"""Docker's part of the watchdog: remove a run's containers once the pytest process that owns them died.

Fixture teardown does not run when pytest is SIGKILLed, so the docker launcher registers the
run's containers with its process's watchdog (``launch.cleanup.watchdog``) before it creates
the container. Once the owner is gone, the watchdog calls ``reap_run_containers``: it force-removes every container labelled with the run id,
looks again a moment later (a create that was in flight), and reclaims the run's /dev/shm
files with the two-scan guard, as teardown would. Each container is frozen, read and killed
before it is removed (``kill_frozen``), so a vLLM creating its message queues at that moment
cannot add a file between the read and the removal (seen in CI: two 240 MiB ``psm_*`` files
left by a pytest SIGKILLed mid-startup).

The command line ``python -m pytest_vllmqual.launch.docker.reaper OWNER_PID OWNER_START RUN_ID
STARTED_EPOCH IPC_HOST`` is deprecated (kept for a release): it starts the one watchdog with that
registration.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pytest_vllmqual.launch.cleanup.owner import owner_alive
from pytest_vllmqual.launch.cleanup.procs import signal_quietly
from pytest_vllmqual.launch.cleanup.shm import SHM_ROOT, reclaim_run_shm, shm_names_held_by
from pytest_vllmqual.launch.docker.spec import RUN_LABEL

_RETRY_FOR_S = 20.0
_MODULE = "pytest_vllmqual.launch.docker.reaper"


def container_pids(client: Any, container: Any) -> list[int]:
    """Host pids of the processes in a running container (``docker top``); [] when it is not running."""
    try:
        top = client.api.top(container.id, ps_args="-eo pid")
    except Exception:  # stopped, gone, or the engine hiccuped: nothing to read
        return []
    titles = [t.strip().upper() for t in top.get("Titles") or []]
    column = titles.index("PID") if "PID" in titles else 0
    pids: list[int] = []
    for row in top.get("Processes") or []:
        try:
            pids.append(int(row[column]))
        except (ValueError, IndexError):
            continue
    return pids


def kill_frozen(client: Any, container: Any, *, root: Path = SHM_ROOT) -> set[str]:
    """Pause the container, note the /dev/shm names its processes hold, and SIGKILL each of them
    while frozen; the names. The removal that follows finds nothing left to run.

    Pausing alone is not enough: ``docker rm -f`` of a paused container kills its init process
    and thaws the rest, which run for a moment until the kernel ends the PID namespace. Seen in
    a CI simulation: a TP worker finished making a ``sem.mp-*`` semaphore in that moment, after
    the look. A frozen process that is sent SIGKILL dies when thawed without running again.
    Killing by host pid needs the rights reading its memory maps needs; without them docker's
    own kill is all there is.
    """
    try:
        container.pause()
    except Exception:  # not running (exited, already paused, being removed): nothing new can appear
        pass
    pids = container_pids(client, container)
    held = shm_names_held_by(pids, root=root)
    for pid in pids:
        signal_quietly(pid, signal.SIGKILL)
    return held


def labelled_containers(client: Any, label: str) -> list[Any]:
    """Every container (any state) carrying ``label`` (``key`` or ``key=value``). One removed between
    the engine's listing and its inspection (a concurrent run's teardown, a sweep) is left out, where
    docker-py's ``containers.list`` raises NotFound for it."""
    import docker.errors  # only now: an idle watchdog should cost nothing

    found = []
    for summary in client.api.containers(all=True, filters={"label": label}):
        try:
            found.append(client.containers.get(summary["Id"]))
        except docker.errors.NotFound:
            continue
    return found


def remove_run_containers(client: Any, run_id: str) -> tuple[int, set[str]]:
    """Force-remove every container labelled with the run id; (how many, shm names they held)."""
    held: set[str] = set()
    removed = 0
    for container in labelled_containers(client, f"{RUN_LABEL}={run_id}"):
        held |= kill_frozen(client, container)
        try:
            container.remove(force=True, v=True)
            removed += 1
        except Exception:  # already gone, or removal in progress: the next pass sees it
            continue
    return removed, held


def reap_run_containers(run_id: str, started_at: float, *, ipc_host: bool, docker_host: str | None = None) -> None:
    """Remove the run's containers (two passes: a create in flight), retrying while the engine is
    unreachable; with ``--ipc=host``, reclaim the run's /dev/shm files as teardown would."""
    import docker  # only now: an idle watchdog should cost nothing

    held: set[str] = set()
    deadline = time.monotonic() + _RETRY_FOR_S
    passes = 0
    while time.monotonic() < deadline:
        try:
            client = docker.DockerClient(base_url=docker_host, timeout=30) if docker_host else \
                docker.from_env(timeout=30)
            _, seen = remove_run_containers(client, run_id)
            held |= seen
            passes += 1
            if passes == 2:  # a second pass catches a container whose create was in flight
                break
            time.sleep(1.0)
        except Exception:  # the engine is restarting or briefly unreachable: retry
            time.sleep(1.0)
    if ipc_host:  # with --ipc=host the run's shared memory lives in this host's /dev/shm
        reclaim_run_shm(run_id, held, started_at)


def reaper_command(owner_pid: str, owner_start: str, run_id: str, started_at: float, *, ipc_host: bool) -> list[str]:
    """Deprecated (the package starts ``launch.cleanup.watchdog``): the old command line of this reaper."""
    return [sys.executable, "-m", _MODULE, owner_pid, owner_start, run_id, repr(started_at), "1" if ipc_host else "0"]


def parse_args(argv: list[str]) -> tuple[int, str, str, float, bool]:
    """(owner pid, owner start, run id, started epoch, ipc host) from the old command line."""
    return int(argv[0]), argv[1], argv[2], float(argv[3]), argv[4] == "1"


def main(argv: list[str]) -> int:
    """Deprecated entry point: the one watchdog, with this run's containers registered."""
    from pytest_vllmqual.launch.cleanup import watchdog

    owner, owner_start, run_id, started_at, ipc_host = parse_args(argv)
    line = f"watch containers {run_id} {started_at!r} {'1' if ipc_host else '0'} {os.environ.get('DOCKER_HOST') or '-'}"
    return watchdog.main(["--owner", str(owner), "--owner-start", owner_start, "--watch", line])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

__all__ = ["container_pids", "kill_frozen", "main", "owner_alive", "parse_args", "reap_run_containers", "reaper_command",
           "remove_run_containers"]
