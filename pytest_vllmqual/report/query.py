"""Questions asked of a public report dict: its gates by name, their outcome, the preflight, the rungs.

Every consumer of a report (the builder's preflight and ladder summaries, the run's
decision, the A/B comparison, the campaign, the HTML page) reads the same facts the same
way through these helpers, so a gate's outcome or the largest completed rung is derived in
one place. They take the report as a mapping, so a report read back from disk works the
same as one just built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.gates.registry import PREFLIGHT_GATES, PREFLIGHT_LABELS
from pytest_vllmqual.records import rung_verdict

__all__ = ["first_line", "gate_outcome", "gates_named", "largest_rung", "ok_rungs", "preflight_summary",
           "recipe_value", "tools_phrase"]


def first_line(text: Any, limit: int = 200) -> str:
    """The first line of a message, shortened: list items stay one line."""
    if not text:
        return ""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tools_phrase(gate: Mapping[str, Any] | None) -> str:
    """"20/20 tool calls" from the tools gate's measurements, else the generic label."""
    if not gate:
        return PREFLIGHT_LABELS["tools"]
    m = gate.get("measurements") or {}
    passed = m.get("passed", m.get("valid_calls"))
    total = m.get("total", m.get("count"))
    if isinstance(passed, int) and isinstance(total, int) and total:
        return f"{passed}/{total} tool calls"
    return PREFLIGHT_LABELS["tools"]


def gates_named(report: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """Every gate record of the report named ``name`` (a gate may run more than once)."""
    return [g for g in report.get("gates") or [] if g.get("gate") == name]


def gate_outcome(report: Mapping[str, Any], name: str) -> str:
    """One outcome per gate name: failed/error beats skipped beats passed; absent if none ran."""
    records = gates_named(report, name)
    if not records:
        return "absent"
    outcomes = [str(g.get("outcome")) for g in records]
    for worst in ("error", "failed", "pending", "skipped"):
        if worst in outcomes:
            return worst
    return "passed" if all(o == "passed" for o in outcomes) else outcomes[0]


def preflight_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight section: {passed, total, summary "k/6", text, gates[{gate, outcome}]}."""
    rows = [{"gate": name, "outcome": gate_outcome(report, name)} for name in PREFLIGHT_GATES]
    passed = sum(1 for r in rows if r["outcome"] == "passed")
    tools = gates_named(report, "tools")
    labels = [tools_phrase(tools[0] if tools else None) if r["gate"] == "tools" else PREFLIGHT_LABELS[r["gate"]]
              for r in rows if r["outcome"] == "passed"]
    summary = f"{passed}/{len(rows)}"
    return {
        "passed": passed,
        "total": len(rows),
        "summary": summary,
        "text": summary + (": " + ", ".join(labels) if labels else ""),
        "gates": rows,
    }


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
