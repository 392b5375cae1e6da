"""Per family and arm: accuracy, the share of answers the judge could not read, the share cut off.

A family is *measured* only when both shares are within the recipe's caps: a family scored mostly on
answers with no number in them, or on answers that ran out of tokens, measures how the model
formats or how long it talks, not the task, so it is ``not measured`` with the reason. A family
measured near 0% or near 100% is reported with a note: a model that never (or always) gets it
right gives both arms the same answers, so that family cannot tell two arms apart for that model.

:func:`rejudge` scores a sidecar's stored answers again, offline, with this package's judges:
what ``vllmqual compare`` recomputes from the files alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..outcomes import ItemOutcome
from .judges import judge

__all__ = ["NEAR_CEILING_PCT", "NEAR_FLOOR_PCT", "family_summaries", "rejudge"]

NEAR_FLOOR_PCT = 10.0
NEAR_CEILING_PCT = 90.0
"""Accuracy at or below the floor (at or above the ceiling) is noted: the family can hardly tell arms apart."""


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def _note(accuracy: float) -> str | None:
    if accuracy <= NEAR_FLOOR_PCT:
        return (f"accuracy near 0 ({accuracy:.1f}%): this model rarely answers this family right, so the family "
                "cannot tell arms apart for this model")
    if accuracy >= NEAR_CEILING_PCT:
        return (f"accuracy near 100% ({accuracy:.1f}%): this model rarely gets this family wrong, so the family "
                "can hardly tell arms apart for this model")
    return None


def family_summaries(outcomes: Sequence[ItemOutcome], *, max_unparsed_pct: float,
                     max_hit_max_tokens_pct: float) -> list[dict[str, Any]]:
    """One row per family, in the order the families first appear: items, correct, accuracy, the
    unparsed and cut-off shares, whether it is measured (and why not), and a note near 0 or 100%."""
    order: list[str] = []
    for outcome in outcomes:
        if outcome.family not in order:
            order.append(outcome.family)
    rows = []
    for family in order:
        mine = [o for o in outcomes if o.family == family]
        correct = sum(o.correct for o in mine)
        unparsed = _pct(sum(not o.parsed for o in mine), len(mine))
        cut = _pct(sum(o.hit_max_tokens for o in mine), len(mine))
        reasons = []
        if unparsed > max_unparsed_pct:
            reasons.append(f"{unparsed:.1f}% of its answers could not be parsed (cap {max_unparsed_pct:g}%)")
        if cut > max_hit_max_tokens_pct:
            reasons.append(f"{cut:.1f}% of its answers ended at max_tokens (cap {max_hit_max_tokens_pct:g}%)")
        accuracy = _pct(correct, len(mine))
        row: dict[str, Any] = {"family": family, "items": len(mine), "correct": correct, "accuracy_pct": accuracy,
                               "unparsed_pct": unparsed, "hit_max_tokens_pct": cut, "measured": not reasons}
        if reasons:
            row["reason"] = "not measured: " + "; ".join(reasons)
        elif _note(accuracy):
            row["note"] = _note(accuracy)
        rows.append(row)
    return rows


def rejudge(answers: Sequence[Mapping[str, Any]]) -> list[ItemOutcome]:
    """The outcomes of a sidecar's stored answers (``items.answers``), judged again by this package's
    judges: each answer's text against its expected answer, with its recorded finish reason."""
    out = []
    for row in answers:
        judged = judge(str(row["judge"]), str(row.get("text") or ""), str(row["expected"]))
        out.append(ItemOutcome(str(row["item_id"]), str(row["family"]), judged.correct, judged.parsed,
                               row.get("finish_reason") == "length"))
    return out
