"""Questions asked of a public report read as a dict: its gates by name, their outcome, the rungs, the recipe.

The decision reads the typed record (``RunRecord``: its ``largest_rung``, ``gates_named``,
``recipe_value``; the preflight in :mod:`~pytest_vllmqual.report.gate_coverage`). The consumers that
hold a report as JSON (the builder's ladder summary, the A/B comparison, the campaign, the HTML
page, the one-line summary) ask the same questions here, by the same rules: a rung counts by
:func:`~pytest_vllmqual.records.rung_verdict`, a gate's outcome is
:func:`~pytest_vllmqual.records.worst_outcome` over its runs, the preflight is
``report.gate_coverage``'s, as the decision reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pytest_vllmqual.records import GateOutcome, GateRecord, rung_verdict, value_at, worst_outcome

from .gate_coverage import preflight_of

__all__ = ["DecisionShown", "decision_shown", "gate_outcome", "gates_named", "largest_rung", "ok_rungs",
           "preflight_summary", "recipe_value"]


def gates_named(report: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """Every gate record of the report named ``name`` (a gate may run more than once)."""
    return [g for g in report.get("gates") or [] if g.get("gate") == name]


def gate_outcome(report: Mapping[str, Any], name: str) -> GateOutcome:
    """One outcome per gate name (:func:`~pytest_vllmqual.records.worst_outcome`); absent if none ran."""
    return worst_outcome(str(g.get("outcome")) for g in gates_named(report, name))


def preflight_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight section of a report dict (see :func:`~pytest_vllmqual.report.gate_coverage.preflight_of`)."""
    return preflight_of([GateRecord.from_dict(g) for g in report.get("gates") or [] if isinstance(g, Mapping)])


def ok_rungs(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Completed rungs with an API-reported size (the only size a capacity claim uses)."""
    return [r for r in report.get("ladder") or [] if rung_verdict(r).completed]


def largest_rung(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The completed rung with the most API-reported prompt tokens (None when none completed)."""
    rungs = ok_rungs(report)
    return max(rungs, key=lambda r: int(r["prompt_tokens"])) if rungs else None


def recipe_value(report: Mapping[str, Any], *path: str) -> Any:
    """A value of the report's recipe content by key path (None when absent)."""
    return value_at((report.get("recipe") or {}).get("content") or {}, *path)


class DecisionShown(NamedTuple):
    """The decision a reader sees first, and the one the run wrote when today's rules differ."""

    first: Mapping[str, Any]
    """Today's rules' decision of a carried-forward record where it differs, else the stored one."""
    stored: Mapping[str, Any] | None
    """The decision the run wrote, as written, when ``first`` is a recomputation (else None)."""
    rules: str
    """Which rules decided ``first`` again, and when ("" when the stored decision stands)."""


def decision_shown(report: Mapping[str, Any]) -> DecisionShown:
    """Which decision leads: a carried-forward record keeps the decision its run wrote, and where the
    rules of today decide it differently (``decision_recomputed``) that recomputation leads, because
    it is what the record is worth under the rules a reader runs now."""
    stored = report.get("decision") or {}
    again = report.get("decision_recomputed")
    later = again.get("decision") if isinstance(again, Mapping) else None
    if not isinstance(again, Mapping) or not isinstance(later, Mapping) or later == stored:
        return DecisionShown(stored, None, "")
    return DecisionShown(later, stored, f"{again.get('rules')} ({again.get('date')})")
