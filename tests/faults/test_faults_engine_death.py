"""An engine that dies mid-request is evidence, not a gap.

Fault server (see fault_server.py ``[fault:engine-dies]``): a real vLLM dies this way only on a
GPU kernel fault, which cannot be caused on demand on any machine, let alone a CPU one.
"""

from __future__ import annotations

import json

from support.fault_harness import Session

from pytest_vllmqual.launch.cleanup.procs import processes_of_run

PLANTED = ("canary-user", "gpu-node-canary", "torchinductor", "ProcessGroupNCCL.cpp", "tmp5")


def test_engine_death_mid_request_is_attributed_with_its_cause(engine_death_session: Session) -> None:
    session = engine_death_session
    killer = session.gate("request_that_kills_the_engine")
    assert killer["outcome"] == "failed" and killer["status"] == "server_dead", killer
    (attempt,) = killer["attempts"]
    # The request in flight is retained: a 200 whose stream carried the engine's error event.
    assert attempt["status_code"] == 200 and attempt["ok"] is False
    # Public text: the allowlisted engine-death template; the private attempt keeps the event.
    assert attempt["error"] == "The engine core died (EngineDeadError).", attempt
    private = (session.private_dir() / attempt["response_artifact"]).read_text()
    assert '"type": "InternalServerError"' in private and "[DONE]" in private
    state = session.report["lifecycle"]["server_state"]
    assert state["status"] == "server_dead"
    # The root cause across every process's lines, first cause first, in the harness's words.
    assert ("a device-side assert in a GPU kernel (index out of bounds: bound 32,768), then the NCCL "
            "watchdog aborted the process group, then the engine core died (EngineDeadError)") in state["detail"]
    facts = session.gate("startup_facts_after_the_death")
    assert facts["outcome"] == "passed", "facts gathered at startup are judged after a later death"
    after = session.gate("request_after_the_death")
    assert after["outcome"] == "error" and after["status"] == "server_dead", after  # ended at setup
    assert after["attempts"] == [], "nothing is sent to a server known to be dead"
    public = json.dumps(session.report)
    assert not [p for p in PLANTED if p in public], "raw log text reached the public report"
    assert processes_of_run(session.run_id) == []
