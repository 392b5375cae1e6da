"""The terminal summary names each failed, errored or skipped gate once per reason: the cases of a
parametrized gate that share a reason are listed on one line."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.report.summary import summary_lines


def _gate(nodeid: str, gate: str, outcome: str, reason: str | None) -> dict[str, Any]:
    return {"nodeid": nodeid, "gate": gate, "outcome": outcome, "reason": reason, "status": None}


def _gate_lines(gates: list[dict[str, Any]]) -> list[str]:
    return [line for line in summary_lines({"gates": gates}, None) if line.startswith("  ")]


def test_cases_of_one_gate_with_one_reason_share_a_line() -> None:
    why = "not applicable to recipe tiny-cpu: cannot do arithmetic"
    lines = _gate_lines([
        _gate("suites/test_quality.py::test_quality_intelligence[addition]", "quality_intelligence", "skipped", why),
        _gate("suites/test_quality.py::test_quality_intelligence[subtraction]", "quality_intelligence", "skipped", why),
        _gate("suites/test_smoke.py::test_smoke", "smoke", "passed", None),
    ])
    assert lines == [f"  skipped: quality_intelligence (addition, subtraction) — {why}"]


def test_different_reasons_and_single_cases_keep_their_own_lines() -> None:
    lines = _gate_lines([
        _gate("s.py::test_tools[a]", "tools", "failed", "19/20 calls valid\nmore detail"),
        _gate("s.py::test_tools[b]", "tools", "failed", "18/20 calls valid"),
        _gate("s.py::test_json", "json", "error", None),
    ])
    assert lines == ["  failed: tools — 19/20 calls valid", "  failed: tools — 18/20 calls valid", "  error: json"]
