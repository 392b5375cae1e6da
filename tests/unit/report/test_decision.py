"""The decision block: verdicts in the reference campaign's vocabulary, and lists generated from the evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.report_samples import blank_sanitizer, reference_control_run, with_every_gate_passed

from pytest_vllmqual.records import GateRecord, RunRecord, Verdict
from pytest_vllmqual.report.decision import decide, preflight_of, public_record, with_decision
from pytest_vllmqual.report.number_format import short_tokens
from pytest_vllmqual.report.public import build_public_report, validation_errors
from pytest_vllmqual.report.query import largest_rung, ok_rungs, preflight_summary, recipe_value
from pytest_vllmqual.report.writer import arm_report


def build(run: RunRecord) -> dict[str, Any]:
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert validation_errors(report) == []
    return report


@pytest.fixture
def run(tmp_path: Path) -> RunRecord:
    return reference_control_run(tmp_path / "private")


def test_reference_control_as_published_is_healthy_and_names_every_gate_it_lacks(run: RunRecord) -> None:
    """The reference campaign published no concurrency or load gate and no per-check quality records: not a candidate."""
    decision = build(run)["decision"]
    assert decision["verdict"] == "healthy"
    missing = {row["gate"]: row for row in decision["gates"] if row["outcome"] == "absent"}
    assert set(missing) == {"openai_sdk", "quality_intelligence", "quality_session_recall", "quality_tools",
                            "quality_long_context", "concurrency", "load"}
    assert ("Concurrency (gate concurrency, capacity): not run: did not run in this session (deselected with -m/-k, "
            "or not collected)") in decision["does_not_prove"]
    assert "not every gate passed: openai_sdk (absent), quality_intelligence (absent)" in decision["reasons"][0]


def test_reference_control_with_every_gate_is_promotable_and_never_more(run: RunRecord) -> None:
    decision = build(with_every_gate_passed(run))["decision"]
    assert decision["verdict"] == "promotable"
    assert decision["summary"] == "promotable; no-promotion"
    assert "at most promotable" in decision["reasons"][0]
    assert decision["boundary"].startswith("No route or promotion changed")


def test_an_unpinned_run_with_every_gate_passed_is_at_most_healthy_and_says_why(run: RunRecord,
                                                                               tmp_path: Path) -> None:
    """Pinned means the model is named by content (a hub revision or a content digest): a run whose
    identity pins neither, or whose recipe says ``pinned: false``, is not promotable."""
    passed = with_every_gate_passed(run)
    passed.identity["checks"] = [c for c in passed.identity["checks"] if c["field"] != "revision"]
    decision = build(passed)["decision"]
    assert decision["verdict"] == "healthy"
    assert ("the run is not pinned: the model is pinned neither by a hub revision nor by a content digest"
            in decision["reasons"][0])
    assert not any(p.startswith("the server that answered is the recipe's pinned identity") for p in decision["proves"])
    assert any(p.startswith("every identity field the recipe names was checked and matched (the model is pinned "
                            "neither") for p in decision["proves"])
    said_unpinned = with_every_gate_passed(reference_control_run(tmp_path / "again"))
    said_unpinned.recipe_content = {**said_unpinned.recipe_content, "pinned": False}
    decision = build(said_unpinned)["decision"]
    assert decision["verdict"] == "healthy"
    assert "the run is not pinned: the recipe says pinned: false" in decision["reasons"][0]


def test_proves_lists_what_was_measured(run: RunRecord) -> None:
    proves = build(run)["decision"]["proves"]
    assert any(p.startswith("a cold managed start passed health and a real completion in 323.5 seconds") for p in proves)
    assert ("the functional preflight passed 6/6: smoke, JSON, 20/20 tool calls, streaming tool, tool-result "
            "continuation, Responses API") in proves
    assert any(p.startswith("a request of 119,503 API-reported prompt tokens completed (17.445 s TTFT") for p in proves)
    assert ("Reasoning prompt contract: each reasoning effort's prompt-token count equals its pinned fingerprint "
            "(low 6, high 85, max 98), by usage and /tokenize (Low/high/max fingerprints passed at 6/85/98 prompt "
            "tokens)") in proves
    assert "a short functional smoke passed after every context probe (5/5)" in proves
    assert any("131,073-token prompt beyond max_model_len was rejected with HTTP 400" in p for p in proves)
    assert any(p.startswith("the engine reported a KV pool of 283,917 tokens (2.17x concurrency at 131,072") for p in proves)
    assert any(p.startswith("the server that answered is the recipe's pinned identity, every pinned field checked")
               and "tensor_parallel_size 2 (from the server)" in p for p in proves)


def test_does_not_prove_is_generated_from_what_is_missing(run: RunRecord) -> None:
    items = build(run)["decision"]["does_not_prove"]
    assert "a request above 300K prompt tokens (the largest measured was 119,503)" in items
    assert "concurrency beyond one active request" in items
    assert any(i.startswith("broad task-quality equivalence") for i in items)
    assert any("whole reported KV pool of 283,917 tokens" in i for i in items)


def test_does_not_prove_without_a_prompt_floor_names_the_gap_to_max_model_len(run: RunRecord) -> None:
    run.recipe_content = {**run.recipe_content, "gates": {}}
    items = build(run)["decision"]["does_not_prove"]
    assert "a request between 119,503 prompt tokens (the largest measured) and the configured 131,072" in items
    assert not any("300K" in i for i in items)


def test_the_configured_context_is_what_the_server_ran_before_what_the_recipe_asked(run: RunRecord) -> None:
    """/v1/models reported 122,880 though the recipe (and so the identity's expected value) asked
    for 131,072: the claims measure against what the server actually served."""
    run.recipe_content = {**run.recipe_content, "gates": {}}
    run.identity["observed"]["max_model_len"] = 122880
    decision = build(run)["decision"]
    assert "a request between 119,503 prompt tokens (the largest measured) and the configured 122,880" in \
        decision["does_not_prove"]
    run.identity["observed"]["max_model_len"] = 393216
    caveats = build(run)["decision"]["caveats"]
    assert ("the engine-reported KV pool (283,917 tokens) is below the configured 393,216-token context"
            in caveats)


def test_a_passed_concurrency_gate_moves_the_concurrency_boundary(run: RunRecord) -> None:
    run.gates.append(GateRecord(nodeid="suites/test_capacity.py::test_concurrency", gate="concurrency",
                                title="Concurrency", outcome="passed", measurements={"requests": 4},
                                summary="4 concurrent requests completed"))
    items = build(run)["decision"]["does_not_prove"]
    assert "concurrency beyond 4 active requests" in items
    assert "concurrency beyond one active request" not in items


def test_skipped_quality_checks_are_listed_with_their_reason(run: RunRecord) -> None:
    run.gates.append(GateRecord(nodeid="suites/test_quality.py::test_long_context", gate="quality_long_context",
                                title="32K context recall", outcome="skipped",
                                reason="not applicable: the recipe's context is below 32K"))
    run.gates.append(GateRecord(nodeid="suites/test_quality.py::test_other", gate="other", title="Other check",
                                outcome="skipped", reason="needs a GPU"))
    report = build(with_every_gate_passed(run))
    items = report["decision"]["does_not_prove"]
    assert ("Long context (gate quality_long_context, quality): not applicable or skipped: not applicable: the "
            "recipe's context is below 32K") in items
    assert "Other check (gate other, other): not applicable or skipped: needs a GPU" in items
    assert report["decision"]["verdict"] == "healthy", "a skipped gate caps the run at healthy, it does not fail it"


def test_a_deselected_gate_is_named_with_how_it_was_deselected(run: RunRecord) -> None:
    run = with_every_gate_passed(run)
    run.gates = [g for g in run.gates if g.gate != "concurrency"]
    run.deselected_gates = [{"gate": "concurrency", "reason": "deselected by -m 'not capacity'"}]
    report = build(run)
    assert report["run"]["deselected_gates"] == run.deselected_gates
    assert report["decision"]["verdict"] == "healthy"
    assert ("Concurrency (gate concurrency, capacity): not run: deselected (deselected by -m 'not capacity')"
            in report["decision"]["does_not_prove"])


def test_long_context_in_smoke_mode_never_claims_recall(run: RunRecord) -> None:
    run.gates.append(GateRecord(nodeid="suites/test_quality.py::test_quality_long_context", gate="quality_long_context",
                                title="", outcome="passed", summary="3/3 at 30,000 tokens (smoke after filler)",
                                measurements={"passed": 3, "repeat": 3, "target_tokens": 30000,
                                              "check": "smoke_after_filler"}))
    proves = build(run)["decision"]["proves"]
    line = next(p for p in proves if p.startswith("Long context:"))
    assert "after 30,000 filler tokens" in line and "no fact was recalled" in line
    assert "recalled at" not in line


def test_post_probe_health_is_structured_never_a_substring(run: RunRecord) -> None:
    """A failed smoke whose text happens to contain "ok" or "passed" does not read as passed."""
    for rung in run.ladder:
        if rung.post_probe_smoke == "passed":
            rung.post_probe_smoke = "failed: finish_reason 'length', content 'ok ok passed'"
    report = build(run)
    assert not any(p.startswith("a short functional smoke passed after every context probe")
                   for p in report["decision"]["proves"])
    assert all(r["post_probe_smoke_ok"] is False for r in report["ladder"] if r["post_probe_smoke"])


def test_caveats_keep_retained_failures_calibration_and_non_monotonic_targets(run: RunRecord) -> None:
    caveats = build(run)["decision"]["caveats"]
    assert any(c.startswith("gate ladder retains 1 failed attempt(s), not retried away; the first (120K) was HTTP 400")
               for c in caveats)
    assert any(c.startswith("the 120K context target returned HTTP 400") for c in caveats)
    assert any(c.startswith("the 117.5K target (117,500) produced 87,207 API-reported prompt tokens (calibration "
                            "error -30,293)") for c in caveats)
    assert ("requested targets were non-monotonic: 119.5K produced 119,503 actual tokens while 120K replay produced "
            "88,939; a target label is not a capacity measurement") in caveats
    assert any(c.startswith("one request per target supports a capacity comparison") for c in caveats)


def test_a_failing_gate_means_no_promotion_with_the_gate_named(run: RunRecord) -> None:
    gate = next(g for g in run.gates if g.gate == "json")
    gate.outcome, gate.reason = "failed", "reply did not match the schema\ntraceback line"
    decision = build(run)["decision"]
    assert decision["verdict"] == "no-promotion" and decision["summary"] == "no-promotion"
    assert "gate json failed: reply did not match the schema" in decision["reasons"]


def test_an_incomplete_run_means_no_promotion_with_the_reason(run: RunRecord) -> None:
    run.status, run.status_reasons = "incomplete", ["the session was interrupted before all gates ran"]
    decision = build(run)["decision"]
    assert decision["verdict"] == "no-promotion"
    assert "the run is incomplete: the session was interrupted before all gates ran" in decision["reasons"]


def test_provenance_mismatch_means_no_promotion_and_a_caveat(run: RunRecord) -> None:
    run.identity["status"] = "provenance_mismatch"
    run.identity["checks"][0].update(observed="0.32.0", ok=False)
    decision = build(run)["decision"]
    assert decision["verdict"] == "no-promotion"
    assert any(r.startswith("provenance mismatch: the server that answered differs from the recipe in runtime_version")
               for r in decision["reasons"])
    assert any(c.startswith("provenance mismatch: runtime_version expected") and "observed '0.32.0'" in c
               for c in decision["caveats"])


def test_unclean_teardown_means_no_promotion(run: RunRecord) -> None:
    run.lifecycle["teardown"] = {**run.lifecycle["teardown"], "clean": False, "surviving_processes": 2}
    decision = build(run)["decision"]
    assert decision["verdict"] == "no-promotion"
    assert any(r.startswith("teardown was not clean: 2 surviving processes") for r in decision["reasons"])


def test_direct_only_passes_as_healthy_and_direct_only(run: RunRecord) -> None:
    run.mode = "direct-only"
    run.lifecycle = {"launcher": "external", "cold_start_s": None, "teardown": None}
    cold = next(g for g in run.gates if g.gate == "cold_start")
    cold.outcome, cold.reason = "skipped", "direct-only: the server was not started by this run"
    decision = build(run)["decision"]
    assert decision["verdict"] == "direct-only"
    assert decision["summary"] == "healthy and direct-only; no-promotion"
    assert "a cold start or a clean teardown of this endpoint: it was used direct-only" in decision["does_not_prove"]
    assert any(c.startswith("direct-only:") for c in decision["caveats"])
    assert not any("cold managed start" in p for p in decision["proves"])


def test_incomplete_evidence_is_healthy_not_candidate(run: RunRecord) -> None:
    run.gates = [g for g in run.gates if g.gate != "tool_continuation"]
    run.ladder = []
    run.engine = {}
    decision = build(run)["decision"]
    assert decision["verdict"] == "healthy" and decision["summary"] == "healthy; no-promotion"
    reason = decision["reasons"][0]
    assert "the functional preflight is 5/6; not passed: tool-result continuation (absent)" in reason
    assert "no capacity rung completed" in reason and "the engine's KV pool was not read" in reason
    assert ("Tool-result continuation (gate tool_continuation, functional): not run: did not run in this session "
            "(deselected with -m/-k, or not collected)") in decision["does_not_prove"]
    assert any(i.startswith("any request near the configured context: no capacity rung completed")
               for i in decision["does_not_prove"])


def test_unverified_identity_and_cpu_engine_are_stated(run: RunRecord) -> None:
    run.identity["status"] = "partially-verified"
    run.identity["not_checked"] = ["max_model_len", "tensor_parallel_size", "image_digest"]
    for check in run.identity["checks"][2:5]:
        check["ok"] = None
    run.engine["device"] = "CPU"  # engine_log.py writes the pool name as the log does
    decision = build(run)["decision"]
    assert decision["verdict"] == "healthy"
    assert ("the identity is partially-verified (not checked: max_model_len, tensor_parallel_size, image_digest)"
            in decision["reasons"][0])
    assert ("that the served model is the recipe's pinned identity in every pinned field; not checked: "
            "max_model_len; tensor_parallel_size; image_digest") in decision["does_not_prove"]
    assert "anything about GPU memory or GPU throughput: the engine ran without a GPU" in decision["does_not_prove"]


def test_no_gates_means_no_promotion(run: RunRecord) -> None:
    run.gates = []
    assert "no gate ran" in build(run)["decision"]["reasons"]


def test_decide_on_a_bare_report_never_crashes_and_never_promotes() -> None:
    decision = decide(public_record({})).to_dict()
    assert decision["verdict"] == "no-promotion"
    assert decision["verdict"] in set(Verdict) - {Verdict.PRIORITY_CHALLENGER}


@pytest.mark.parametrize(("n", "text"), [(300000, "300K"), (117500, "117.5K"), (131072, "131K"), (393216, "393K"),
                                         (119503, "119K"), (32768, "32K"), (512, "512")])
def test_short_tokens_match_the_reference_campaigns_way_of_writing_sizes(n: int, text: str) -> None:
    assert short_tokens(n) == text


def test_the_builder_does_not_judge_and_with_decision_adds_the_verdict_where_reports_have_it(run: RunRecord) -> None:
    """evidence builds the report without a verdict; decision.with_decision is the one place they meet."""
    bare = build_public_report(run, sanitizer=blank_sanitizer())
    assert "decision" not in bare
    assert validation_errors(bare)  # a report without its decision is not a valid report
    report = with_decision(bare)
    assert report["decision"] == decide(public_record(bare)).to_dict()
    keys = list(report)
    assert keys[keys.index("ladder_summary") + 1] == "decision"
    assert keys == [*list(bare)[: list(bare).index("ladder_summary") + 1], "decision",
                    *list(bare)[list(bare).index("ladder_summary") + 1:]]
    again = with_decision({**report, "decision": {"verdict": "stale"}})
    assert list(again) == keys and again["decision"] == report["decision"]


def test_arm_report_decides_on_the_typed_public_record_and_renders_it_once(run: RunRecord) -> None:
    """The run's entry point: the same decision as a report read back from disk gets, one rule."""
    quiet = blank_sanitizer()
    report = arm_report(with_every_gate_passed(run), sanitizer=quiet, tool_version="0.0-test")
    assert validation_errors(report) == []
    decision = decide(public_record(report))
    assert decision.verdict is Verdict.PROMOTABLE and report["decision"] == decision.to_dict()
    assert report["decision"] == with_decision(report)["decision"]
    assert type(report["decision"]["verdict"]) is str


def test_the_typed_record_answers_the_decision_s_questions_as_the_report_dict_does(run: RunRecord) -> None:
    """The decision asks the record (largest rung, completed rungs, a gate's runs, a recipe value) and
    owns the preflight; a consumer holding the report as JSON gets the same answers from ``query``."""
    report = build(run)
    record = public_record(report)
    top, top_dict = record.largest_rung, largest_rung(report)
    assert top is not None and top_dict is not None
    assert (top.index, top.prompt_tokens) == (top_dict["index"], top_dict["prompt_tokens"])
    assert [r.index for r in record.completed_rungs] == [r["index"] for r in ok_rungs(report)]
    assert len(record.completed_rungs) >= 2 and len(record.completed_rungs) < len(record.ladder)
    assert preflight_of(record.gates) == preflight_summary(report) == report["preflight"]
    assert [g.gate for g in record.gates_named("smoke")] == ["smoke"]
    assert record.recipe_value("serve", "max_model_len") == recipe_value(report, "serve", "max_model_len") == 131072
    assert record.recipe_value("serve", "max_model_len", "deeper") is None
    assert record.recipe_value("no_such_section", "x") is None
    empty = public_record({"run": {}, "gates": []})
    assert (empty.largest_rung, empty.completed_rungs, empty.gates_named("smoke")) == (None, [], [])


def test_the_decision_is_made_in_one_module() -> None:
    """``report.decision`` asks nothing of ``report.query``: the questions a verdict depends on are
    the typed record's or the decision's own, so the rule is read in one place."""
    import ast

    import pytest_vllmqual.report.decision as decision

    tree = ast.parse(Path(decision.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported.isdisjoint({"query", "pytest_vllmqual.report.query"}), imported
