"""The session-scoped server: one server per arm, started once, stopped when pytest
finishes the arm, and the arm's report written before the next arm's server starts.

Fault server, not vLLM: what is checked is the order of starts, stops and reports across
two arms; two real vLLM boots would add minutes and prove nothing more about that order.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from support.fault_harness import Session, fault_server_recipe, kill_tagged, server_sessions, tagged_processes

ARM_GATES = '''
import json, os, pathlib

LOG = pathlib.Path(os.environ["LIFECYCLE_LOG"])
REPORTS = pathlib.Path(os.environ["LIFECYCLE_REPORTS"])


def _note(**fields):
    with LOG.open("a") as handle:
        handle.write(json.dumps(fields) + "\\n")


def test_first(vllm_server, vllmqual_arm, gate):
    """First gate of an arm: which server, and which reports exist already."""
    _note(arm=vllmqual_arm, test="first", server=id(vllm_server), url=vllm_server.base_url,
          reports=sorted(p.name for p in REPORTS.glob("*.json")))
    gate.summary("ok")


def test_second(vllm_server, vllmqual_arm, gate):
    """Second gate of the arm: the same server object."""
    _note(arm=vllmqual_arm, test="second", server=id(vllm_server), url=vllm_server.base_url, reports=[])
    gate.summary("ok")
'''


def test_each_arm_has_one_server_that_stops_before_the_next_starts(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    control = fault_server_recipe(recipes, "fs-control")
    candidate = fault_server_recipe(recipes, "fs-candidate")
    gates = tmp_path / "test_arm_gates.py"
    gates.write_text(ARM_GATES)
    log = tmp_path / "lifecycle.jsonl"
    session = Session(tmp_path / "run", None, [gates],
                      args=["--vllmqual-recipes-dir", str(recipes), "--ab", "fs-control,fs-candidate"],
                      env={"LIFECYCLE_LOG": str(log), "LIFECYCLE_REPORTS": str(tmp_path / "run" / "reports")})
    try:
        session.start().wait(timeout_s=180)
        left = [p.describe() for r in (control, candidate) for p in tagged_processes(r.tag)]
    finally:
        for recipe in (control, candidate):
            kill_tagged(recipe.tag, server_sessions(session))
    assert session.returncode == 0, session.stdout[-4000:]
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    order = [(n["arm"], n["test"]) for n in notes]
    assert order == [("A-fs-control", "first"), ("A-fs-control", "second"),
                     ("B-fs-candidate", "first"), ("B-fs-candidate", "second")], order
    by_arm = {arm: [n for n in notes if n["arm"] == arm] for arm in ("A-fs-control", "B-fs-candidate")}
    for arm, arm_notes in by_arm.items():
        assert arm_notes[0]["server"] == arm_notes[1]["server"], f"{arm}: one session-scoped server per arm"
    first_of_b = by_arm["B-fs-candidate"][0]
    assert any(name.startswith("A-fs-control-") for name in first_of_b["reports"]), \
        "the control arm's report is written when pytest finishes the arm, before the candidate starts"
    assert not any(name.startswith("B-fs-candidate-") for name in first_of_b["reports"])
    assert by_arm["A-fs-control"][0]["reports"] == []
    control_url = by_arm["A-fs-control"][0]["url"]
    try:
        httpx.get(f"{control_url}/health", timeout=2)
    except httpx.TransportError:
        pass
    else:
        raise AssertionError(f"the control arm's server still answers at {control_url} after the session")
    arm_reports = [p for p in session.report_paths() if not p.name.startswith("comparison-")]
    assert sorted(p.name.split("-2")[0] for p in arm_reports) == ["A-fs-control", "B-fs-candidate"]
    for path in arm_reports:
        teardown = json.loads(path.read_text())["lifecycle"]["teardown"]
        assert teardown["clean"] is True and teardown["surviving_processes"] == 0, teardown
    assert left == [], f"processes of the arms' servers alive after the session: {left}"


STOP_EARLY_GATES = '''
def test_first_fails(vllm_server, gate):
    gate.summary("fails on purpose")
    assert False, "planted failure"


def test_never_runs(vllm_server, gate):
    gate.summary("ran")
'''


def test_a_session_stopped_by_x_writes_an_incomplete_report(tmp_path: Path) -> None:
    """``-x`` stops the session after the first failure; the arm's report is written when pytest
    tears the session-scoped server down, and it must say the run was cut short."""
    recipe = fault_server_recipe(tmp_path / "recipes", "fs-stop-early")
    gates = tmp_path / "test_stop_early.py"
    gates.write_text(STOP_EARLY_GATES)
    session = Session(tmp_path / "run", recipe, [gates], args=["-x", "--vllmqual-no-fail-fast"])
    try:
        session.start().wait(timeout_s=120)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))
    assert session.returncode == 1, session.stdout[-3000:]
    report = session.report
    assert [g["gate"] for g in report["gates"]] == ["first_fails"]
    assert report["run"]["status"] == "incomplete", report["run"]
    assert "the session was interrupted before all gates ran" in report["run"]["status_reasons"]
    assert report["lifecycle"]["teardown"]["clean"] is True
