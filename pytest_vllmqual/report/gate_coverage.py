"""The coverage of a run: which gates count towards its verdict and how each ended, and the
preflight (the six quick gates every qualification starts with) read from its gate records.

:func:`coverage` lists every gate of the registry, every other gate that ran and every other
gate pytest deselected, one :class:`CoverageRow` each with why it did not pass; a ``promotable``
verdict (``report.decision``) needs every row passed. :func:`preflight_of` is the report's
preflight section, which the decision, the campaign's requirements and the pages read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.gates.registry import (
    COMPARISON_GATES,
    PREFLIGHT_GATES,
    PREFLIGHT_LABELS,
    REGISTRY,
    family_of,
    title_of,
)
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.records import GateOutcome, GateRecord, RunRecord, worst_outcome

__all__ = ["CoverageRow", "coverage", "preflight_of"]


@dataclass(frozen=True)
class CoverageRow:
    """One gate of the coverage table: every registered gate, and every other gate that ran."""

    gate: str
    family: str
    title: str
    outcome: GateOutcome
    #: Why it did not pass (None when it passed).
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"gate": self.gate, "family": self.family, "title": self.title,
                               "outcome": self.outcome.value}
        if self.reason is not None:
            row["reason"] = self.reason
        return row


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


def coverage(record: RunRecord) -> list[CoverageRow]:
    """Every registered gate, every other gate that ran and every other gate pytest deselected (a
    user's own included; a gate only a comparison judges only when it ran), one row each, with why
    it did not pass. ``promotable`` needs every row passed."""
    deselected = {str(d.get("gate")): str(d.get("reason") or "") for d in record.deselected_gates}
    names = [spec.name for spec in REGISTRY]
    for name in [g.gate for g in record.gates] + [n for n in deselected if n not in COMPARISON_GATES]:
        if name and name not in names:
            names.append(name)
    rows: list[CoverageRow] = []
    for name in names:
        records = record.gates_named(name)
        outcome = worst_outcome(g.outcome for g in records)
        markers = [str(m) for r in records for m in r.markers]
        reason: str | None = None
        if outcome is GateOutcome.ABSENT:
            reason = (f"deselected ({deselected[name]})" if deselected.get(name)
                      else "did not run in this session (deselected with -m/-k, or not collected)")
        elif outcome is not GateOutcome.PASSED:
            worst = next((r for r in records if r.outcome == outcome), records[0])
            reason = first_line(worst.reason) or "no reason given"
        rows.append(CoverageRow(name, family_of(name, markers) or "other",
                                title_of(name, records[0].title if records else ""), outcome, reason))
    return rows
