"""A server that dies during a gate: the run says which gate, which request and what the kernel
said (an OOM kill read from the cgroup's counter and the kernel log, both recorded files here),
and the later gates say it died, never that it did not start."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.recipes import tiny

from pytest_vllmqual.session.server import STATE_FILE, ServerGuard, WorkerServer

DATA = Path(__file__).resolve().parents[1] / "data" / "oom"


def _guard(tmp_path: Path) -> ServerGuard:
    info = WorkerServer({"private_dir": str(tmp_path), "handle": {
        "base_url": "http://127.0.0.1:1", "served_model_name": "tiny", "launcher_kind": "subprocess"}}, tiny())
    assert info.guard is not None
    return info.guard


def test_a_death_says_during_which_gate_and_not_that_the_server_never_started(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    guard.current_gate = "equivalence"
    guard.mark("server_dead", "the server process exited with status -9")
    gone = ServerGuard(guard.handle, tmp_path / STATE_FILE).gone_error()
    assert gone is not None and gone.status == "server_dead"
    assert str(gone).startswith("the server died, during gate equivalence (the server process exited with "
                                "status -9)"), str(gone)
    assert "did not start" not in str(gone)


def test_the_kernels_word_and_the_request_in_flight_reach_the_state(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_vllmqual.launch import oom

    monkeypatch.setattr(oom, "_kernel_log", lambda: (DATA / "dmesg.txt").read_text())
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    shutil.copy(DATA / "memory.oom_control.v1", cgroup / "memory.oom_control")
    guard = _guard(tmp_path)
    guard.kernel = oom.KernelWatch(pid=30000, cgroup=cgroup, kills_at_start=0, since_s=7000.0, pids={30000, 30725})
    guard.gate_started("equivalence")
    guard.mark("server_dead", "the server process exited with status -9")  # the death monitor: no request known
    guard.mark("server_dead", "the server process exited with status -9", request="equivalence-chunk05-1024")
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert (state["during_gate"], state["request"], state["kernel"]["oom_killed"]) == \
        ("equivalence", "equivalence-chunk05-1024", True)
    gone = guard.gone_error()
    assert gone is not None and gone.during == "equivalence"
    assert str(gone).startswith(
        "the server died: killed by the kernel's OOM killer at 0.1 GB resident (python3, pid 30725), read from the "
        "cgroup's oom_kill counter and the kernel log, while answering the equivalence probe's 1,024-token "
        "prompt-log-probability request (equivalence-chunk05-1024), during gate equivalence"), str(gone)


def test_the_runs_status_says_which_gate_the_server_died_during(tmp_path: Path) -> None:
    from pytest_vllmqual.session.controller import ControllerRun
    from pytest_vllmqual.session.reports import run_record
    from pytest_vllmqual.session.server import ServerManager
    from tests.unit.session.test_run import settings_for

    run = ControllerRun(settings_for(tmp_path / "reports"), tiny(), progress=lambda line: None, invocation_args=[])
    arm = run.arm("tiny-cpu")
    arm.manager = ServerManager(tiny(), run_id="r1", private_dir=tmp_path, progress=lambda line: None)
    arm.manager.guard = _guard(tmp_path)
    arm.manager.guard.current_gate = "equivalence"
    arm.manager.guard.mark("server_dead", "the server process exited with status -9")
    record = run_record(arm, mode="managed", reproduce="pytest --recipe=tiny-cpu", deselected=[])
    assert record.status == "incomplete"
    assert record.status_reasons == ["the server died, during gate equivalence (the server process exited with "
                                     "status -9) [server_dead]"], record.status_reasons
