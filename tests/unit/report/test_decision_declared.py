"""A gate the recipe declares not applicable that measured failing is excused, not passed: the
decision's reason says so and names it, never "every gate that ran passed"."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.records import GateOutcome, GateRecord, RunMode, RunRecord
from pytest_vllmqual.report.decision import decide

DECLARED = {"declared_not_applicable": "the fixture model has no reasoning"}


def _gate(name: str, outcome: str, **measurements: Any) -> GateRecord:
    return GateRecord(nodeid=f"t::{name}", gate=name, title=name, outcome=GateOutcome(outcome),
                      reason=None if outcome == "passed" else f"not applicable to the recipe ({name})",
                      measurements=dict(measurements))


def _record(mode: RunMode = RunMode.MANAGED) -> RunRecord:
    return RunRecord(run_id="r", arm="a", recipe_name="a", recipe_path="", recipe_sha256="0" * 64, recipe_content={},
                     started_utc="2026-12-04T00:00:00Z", finished_utc=None, mode=mode, status="complete",
                     gates=[_gate("smoke", "passed"),
                            _gate("quality_intelligence", "skipped", **DECLARED, measured_outcome="failed"),
                            _gate("quality_session_recall", "skipped", **DECLARED, measured_outcome="failed")])


def test_declared_gates_measured_failing_are_said_excused_not_passed() -> None:
    decision = decide(_record())
    assert decision.verdict.value == "healthy"
    reason = decision.reasons[0]
    assert not reason.startswith("every gate that ran passed,"), reason
    assert reason.startswith("every gate that ran passed or was excused by a declaration (measured failing under a "
                             "declaration: quality_intelligence, quality_session_recall), but the qualification is "
                             "incomplete: "), reason


def test_direct_only_says_the_same_of_declared_gates() -> None:
    decision = decide(_record(RunMode.DIRECT_ONLY))
    assert decision.verdict.value == "direct-only"
    assert decision.reasons[0] == ("every gate that ran passed or was excused by a declaration (measured failing "
                                   "under a declaration: quality_intelligence, quality_session_recall) on an endpoint "
                                   "this run did not start or stop"), decision.reasons


def test_without_a_declared_failure_the_reason_keeps_its_words() -> None:
    record = _record()
    record.gates = record.gates[:1]
    assert decide(record).reasons[0].startswith("every gate that ran passed, but the qualification is incomplete")
