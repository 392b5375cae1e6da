"""``promotable`` means every gate of the decision's coverage ran and passed: any row that was not
run, deselected or skipped (a functional gate outside the preflight, or a user's own gate,
included) caps a pinned run at ``healthy`` and is named in the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.report_samples import blank_sanitizer, reference_control_run, with_every_gate_passed

from pytest_vllmqual.gates.registry import PREFLIGHT_GATES, PREFLIGHT_LABELS, REGISTRY
from pytest_vllmqual.records import GateOutcome, GateRecord, RunRecord
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.public import build_public_report, validation_errors


def build(run: RunRecord) -> dict[str, Any]:
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert validation_errors(report) == []
    return report


@pytest.fixture
def promotable(tmp_path: Path) -> RunRecord:
    run = with_every_gate_passed(reference_control_run(tmp_path / "private"))
    assert build(run)["decision"]["verdict"] == "promotable", "the sample must start promotable"
    return run


@pytest.mark.parametrize("name", [spec.name for spec in REGISTRY])
def test_any_registered_gate_deselected_keeps_a_pinned_run_below_promotable_and_is_named(
        promotable: RunRecord, name: str) -> None:
    promotable.gates = [g for g in promotable.gates if g.gate != name]
    promotable.deselected_gates = [{"gate": name, "reason": f"deselected by -k 'not {name}'"}]
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "healthy", decision["reasons"]
    named = f"{PREFLIGHT_LABELS[name]} (absent)" if name in PREFLIGHT_GATES else f"{name} (absent)"
    assert named in decision["reasons"][0], "named by its gate name, or by its preflight label in the preflight's line"


def test_openai_sdk_deselected_is_healthy_and_the_reason_names_it(promotable: RunRecord) -> None:
    promotable.gates = [g for g in promotable.gates if g.gate != "openai_sdk"]
    promotable.deselected_gates = [{"gate": "openai_sdk", "reason": "deselected by -k 'not openai_sdk'"}]
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "healthy"
    assert "not every gate passed: openai_sdk (absent)" in decision["reasons"][0]
    assert "every registered gate of every family passed" not in decision["reasons"][0]


def test_openai_sdk_skipped_is_healthy_and_the_reason_names_it(promotable: RunRecord) -> None:
    for gate in promotable.gates:
        if gate.gate == "openai_sdk":
            gate.outcome, gate.reason = GateOutcome.SKIPPED, "the openai package is not installed"
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "healthy"
    assert "not every gate passed: openai_sdk (skipped)" in decision["reasons"][0]


def test_a_user_s_own_gate_deselected_or_skipped_keeps_a_run_below_promotable(promotable: RunRecord) -> None:
    promotable.deselected_gates = [{"gate": "house_style", "reason": "deselected by -m 'not house'"}]
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "healthy"
    assert "house_style (absent)" in decision["reasons"][0]
    assert {"gate": "house_style", "outcome": "absent"}.items() <= next(
        r for r in decision["gates"] if r["gate"] == "house_style").items()
    promotable.deselected_gates = []
    promotable.gates.append(GateRecord(nodeid="house/test_style.py::test_style", gate="house_style", title="House style",
                                       outcome=GateOutcome.SKIPPED, reason="no style guide configured"))
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "healthy" and "house_style (skipped)" in decision["reasons"][0]


def test_a_deselected_comparison_gate_is_not_a_row_of_a_single_run(promotable: RunRecord) -> None:
    """The equivalence probe is judged only by a comparison: deselecting it leaves a run promotable."""
    promotable.deselected_gates = [{"gate": "equivalence", "reason": "deselected by -m 'not equivalence'"}]
    decision = build(promotable)["decision"]
    assert decision["verdict"] == "promotable"
    assert "every gate of the coverage ran and passed" in decision["reasons"][0]
