"""Questions asked of a public report: its gates by name, their outcome, the preflight, the rungs.

Every consumer of a report (the builder's preflight and ladder summaries, the run's
decision, the A/B comparison, the campaign, the HTML page) reads the same facts the same
way through these helpers, so a gate's outcome or the largest completed rung is derived in
one place. The preflight and the largest rung are answered on typed records
(:func:`preflight_of`, :func:`largest_of`, as the decision reads them); the dict-level
helpers answer the same questions of a report read back from disk through them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_vllmqual.gates.registry import PREFLIGHT_GATES, PREFLIGHT_LABELS
from pytest_vllmqual.records import GateOutcome, GateRecord, RungRecord, rung_verdict, worst_outcome

__all__ = ["first_line", "gate_outcome", "gates_named", "largest_of", "largest_rung", "ok_rungs", "preflight_of",
           "preflight_summary", "recipe_value"]


def first_line(text: Any, limit: int = 200) -> str:
    """The first line of a message, shortened: list items stay one line."""
    if not text:
        return ""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _tools_phrase(measurements: Mapping[str, Any] | None) -> str:
    """"20/20 tool calls" from the tools gate's measurements, else the generic label."""
    if not measurements:
        return PREFLIGHT_LABELS["tools"]
    m = measurements
    passed = m.get("passed", m.get("valid_calls"))
    total = m.get("total", m.get("count"))
    if isinstance(passed, int) and isinstance(total, int) and total:
        return f"{passed}/{total} tool calls"
    return PREFLIGHT_LABELS["tools"]


def gates_named(report: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """Every gate record of the report named ``name`` (a gate may run more than once)."""
    return [g for g in report.get("gates") or [] if g.get("gate") == name]


def gate_outcome(report: Mapping[str, Any], name: str) -> GateOutcome:
    """One outcome per gate name (:func:`~pytest_vllmqual.records.worst_outcome`); absent if none ran."""
    return worst_outcome(str(g.get("outcome")) for g in gates_named(report, name))


def preflight_of(gates: Sequence[GateRecord]) -> dict[str, Any]:
    """The preflight section: {passed, total, summary "k/6", text, gates[{gate, outcome}]}."""
    rows = [{"gate": name, "outcome": worst_outcome(g.outcome for g in gates if g.gate == name).value}
            for name in PREFLIGHT_GATES]
    passed = sum(1 for r in rows if r["outcome"] == GateOutcome.PASSED)
    tools = [g for g in gates if g.gate == "tools"]
    labels = [_tools_phrase(tools[0].measurements if tools else None) if r["gate"] == "tools"
              else PREFLIGHT_LABELS[r["gate"]] for r in rows if r["outcome"] == GateOutcome.PASSED]
    summary = f"{passed}/{len(rows)}"
    return {
        "passed": passed,
        "total": len(rows),
        "summary": summary,
        "text": summary + (": " + ", ".join(labels) if labels else ""),
        "gates": rows,
    }


def preflight_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight section of a report dict (see :func:`preflight_of`)."""
    return preflight_of([GateRecord.from_dict(g) for g in report.get("gates") or [] if isinstance(g, Mapping)])


def largest_of(rungs: Iterable[RungRecord]) -> RungRecord | None:
    """The completed rung with the most API-reported prompt tokens (None when none completed)."""
    completed = [r for r in rungs if r.verdict.completed]
    return max(completed, key=lambda r: int(r.prompt_tokens or 0)) if completed else None


def ok_rungs(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Completed rungs with an API-reported size (the only size a capacity claim uses)."""
    return [r for r in report.get("ladder") or [] if rung_verdict(r).completed]


def largest_rung(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The completed rung with the most API-reported prompt tokens (None when none completed)."""
    rungs = ok_rungs(report)
    return max(rungs, key=lambda r: int(r["prompt_tokens"])) if rungs else None


def recipe_value(report: Mapping[str, Any], *path: str) -> Any:
    """A value of the report's recipe content by key path (None when absent); shared by compare/campaign."""
    node: Any = (report.get("recipe") or {}).get("content") or {}
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
