"""Questions asked of a public report read as a dict: its gates by name, their outcome, the rungs, the recipe.

The decision reads the typed record (``RunRecord``: its ``largest_rung``, ``gates_named``,
``recipe_value``; the preflight in :mod:`~pytest_vllmqual.report.decision`). The consumers that
hold a report as JSON (the builder's ladder summary, the A/B comparison, the campaign, the HTML
page, the one-line summary) ask the same questions here, by the same rules: a rung counts by
:func:`~pytest_vllmqual.records.rung_verdict`, a gate's outcome is
:func:`~pytest_vllmqual.records.worst_outcome` over its runs, the preflight is the decision's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.records import GateOutcome, GateRecord, rung_verdict, value_at, worst_outcome

from .decision import preflight_of

__all__ = ["gate_outcome", "gates_named", "largest_rung", "ok_rungs", "preflight_summary", "recipe_value"]


def gates_named(report: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """Every gate record of the report named ``name`` (a gate may run more than once)."""
    return [g for g in report.get("gates") or [] if g.get("gate") == name]


def gate_outcome(report: Mapping[str, Any], name: str) -> GateOutcome:
    """One outcome per gate name (:func:`~pytest_vllmqual.records.worst_outcome`); absent if none ran."""
    return worst_outcome(str(g.get("outcome")) for g in gates_named(report, name))


def preflight_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight section of a report dict (see :func:`~pytest_vllmqual.report.decision.preflight_of`)."""
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
