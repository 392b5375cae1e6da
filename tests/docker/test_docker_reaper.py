"""Reaping that is safe: a SIGKILLed pytest leaves no container, and sweeps touch only the
containers whose owner is provably gone, never a concurrent run's."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import docker.errors
import pytest
from docker_harness import (
    RECIPE_LABEL,
    containers,
    dead_process,
    derive_docker_recipe,
    engine,
    image_reference,
    live_process,
    owned_sleeper,
)
from support.fault_harness import ROOT, Recipe, Session
from support.gatekit import run_shm_files, wait_for

from pytest_vllmqual.launch.cleanup.shm import SHM_ROOT, reclaim_unheld
from pytest_vllmqual.launch.docker.reaper import kill_frozen

pytestmark = [pytest.mark.real_vllm, pytest.mark.needs_docker]
SMOKE = ROOT / "suites" / "test_smoke.py"


def running_container(client: object, recipe_name: str) -> object:
    found = [c for c in containers(client, f"{RECIPE_LABEL}={recipe_name}") if c.status == "running"]
    return found[0] if found else None


def test_sigkilled_pytest_leaves_no_container_after_30_s(tmp_path: Path) -> None:
    """SIGKILL pytest while its container serves: no teardown runs, the docker reaper must
    remove the container (within 30 s) and reclaim the run's /dev/shm files.
    Owns its server: its pytest is SIGKILLed while the container serves."""
    client = engine()
    recipe = derive_docker_recipe(tmp_path, "tiny-docker-sigkill")
    started_at = time.time()
    session = Session(tmp_path, recipe, [SMOKE]).start()
    try:
        container = wait_for(lambda: running_container(client, recipe.name), 300)
        assert container is not None, "no running container of the session appeared"
        # mid-run: once the engine has initialised its TP ranks (shared memory in use)
        assert wait_for(lambda: "Worker_TP1" in container.logs().decode(errors="replace"), 300)
        killed_at = time.monotonic()
        session.signal(signal.SIGKILL)
        gone = wait_for(lambda: not containers(client, f"{RECIPE_LABEL}={recipe.name}"), 30)
        waited = time.monotonic() - killed_at
        assert gone, f"a container of the killed run still exists {waited:.0f} s after SIGKILL"
        print(f"container removed {waited:.1f} s after SIGKILL of pytest")
        assert wait_for(lambda: run_shm_files(started_at) == [], 10), run_shm_files(started_at)
    finally:
        if session.proc is not None:
            session.proc.kill()
            session.proc.communicate()
        for leftover in containers(client, f"{RECIPE_LABEL}={recipe.name}"):
            leftover.remove(force=True)


def one_core_recipe(directory: Path, name: str, core: str) -> Recipe:
    """tiny-docker at TP=1 on one core of its own, the engine core running the model itself (no
    worker process: one vLLM import fewer): two of them side by side on a 2-core machine do not
    fight over the same cores (the sweep under test depends on neither TP nor a worker)."""
    return derive_docker_recipe(directory, name, {"serve": {"tensor_parallel_size": 1},
                                                  "launcher": {"env": {"VLLM_CPU_OMP_THREADS_BIND": core,
                                                                       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}})


def test_two_concurrent_runs_keep_their_containers(tmp_path: Path) -> None:
    """Two real tiny-docker runs at once: the second starts while the first one's container
    serves, and its leftover sweep must leave that container (and a planted container whose
    owner lives) alone, while it removes a planted container whose owner is dead. Both finish.
    Owns its servers: two managed runs at once are what is tested."""
    client = engine()
    holder, holder_start = live_process()
    dead_pid, dead_start = dead_process()
    planted_live = owned_sleeper(client, "planted-live-owner", holder.pid, holder_start)
    planted_dead = owned_sleeper(client, "planted-dead-owner", dead_pid, dead_start)
    first = second = None
    try:
        first = Session(tmp_path / "a", one_core_recipe(tmp_path / "a", "tiny-docker-a", "0"), [SMOKE]).start()
        assert wait_for(lambda: running_container(client, "tiny-docker-a"), 300), "run A has no container"
        second = Session(tmp_path / "b", one_core_recipe(tmp_path / "b", "tiny-docker-b", "1"), [SMOKE]).start()
        first.wait(900).snapshot()
        second.wait(900).snapshot()
        for session in (first, second):
            assert session.returncode == 0, session.tail()
            assert session.report["run"]["status"] == "complete", session.report["run"]
            teardown = session.report["lifecycle"]["teardown"]
            assert teardown["clean"] and teardown["containers_left"] == 0, teardown
        # B's sweep saw A's live container and the planted live-owner one, and kept both
        assert "left 2 labelled container(s) alone" in second.stdout, second.tail()
        removed = [line for line in first.stdout.splitlines() + second.stdout.splitlines()
                   if "removed 1 leftover container(s) whose owner is gone" in line]
        assert len(removed) == 1 and "vllmqual-planted-dead-owner" in removed[0], removed
        assert "is not running" in removed[0]
        planted_live.reload()
        assert planted_live.status == "running"
        assert containers(client, "vllmqual.run=planted-dead-owner") == []
    finally:
        for session in (first, second):
            if session is not None and session.proc is not None and session.proc.poll() is None:
                session.proc.kill()
                session.proc.communicate()
        holder.kill()
        holder.wait()
        for planted in (planted_live, planted_dead):
            try:
                planted.remove(force=True)
            except Exception:  # already removed by the sweep
                pass


MAKER = """
import mmap, os, sys, time
if os.fork():  # init waits; the child, not PID 1, makes the files (as vLLM's workers do)
    os.wait()
    sys.exit(0)
prefix, kept = sys.argv[1], []
for n in range(100000):
    fd = os.open(f"/dev/shm/{prefix}{n:06d}", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 4096)
    kept.append(mmap.mmap(fd, 4096))
    os.close(fd)
    time.sleep(0.002)
"""


def test_last_look_is_taken_frozen_and_nothing_runs_after_it() -> None:
    """The reaper's last look before it removes a container: a process that makes a new mapped
    /dev/shm file every 2 ms (--ipc=host) is frozen, looked at and killed. Every file left
    afterwards was named by the look, so the reclaim removes them all. A pause alone let it
    make files after the look: ``docker rm -f`` thaws a paused container's non-init processes
    before the kernel kills them (a CI simulation kept a vLLM worker's ``sem.mp-*`` that way)."""
    client = engine()
    prefix = f"psm_vllmqual_frozen_{uuid.uuid4().hex[:8]}_"
    container = client.containers.run(image_reference(), entrypoint=["/opt/vllm/bin/python", "-c", MAKER, prefix],
                                      ipc_mode="host", detach=True)

    def made() -> set[str]:
        return {p.name for p in SHM_ROOT.iterdir() if p.name.startswith(prefix)}

    try:
        assert wait_for(lambda: len(made()) >= 50, 60), container.logs()
        held = kill_frozen(client, container)
        container.reload()
        assert container.status == "paused"
        container.remove(force=True)
        left = made()
        assert left and left <= held, f"made after the look: {sorted(left - held)[:5]}"
        assert reclaim_unheld(None, held) is not None
        assert made() == set(), "files the look named were not reclaimed"
    finally:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        for name in made():
            (SHM_ROOT / name).unlink(missing_ok=True)
