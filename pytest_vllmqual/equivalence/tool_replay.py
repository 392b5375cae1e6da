"""What an arm's tool-call replay can tell: its accuracy and whether it lies in the useful range.

Paired flips between two arms need items that either arm could get wrong. An arm that gets every
case right (or none) gives no discordant pairs whatever changed, so "non-inferior" from such a
replay would rest on nothing. Each arm's replay block says whether its accuracy lies between 20%
and 80% (``informative``); a comparison reads both blocks and, when neither arm is inside that
range, says the replay cannot tell the arms apart instead of judging it (:func:`pair_informative`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .outcomes import ItemOutcome

__all__ = ["FAMILY", "SIDECAR_KEY", "USEFUL_RANGE", "arm_range", "pair_informative"]

FAMILY = "tool_replay"
"""The family of every replay outcome (:class:`ItemOutcome`)."""
SIDECAR_KEY = "tool_replay"
"""The sidecar's top-level key that holds an arm's replay (``bank``, ``outcomes``, ``calls``)."""
USEFUL_RANGE = (0.2, 0.8)
"""The accuracies at which a replay can show flips both ways (inclusive)."""


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def arm_range(outcomes: Sequence[ItemOutcome], useful: tuple[float, float] = USEFUL_RANGE) -> dict[str, Any]:
    """One arm's accuracy and whether it lies in the useful range, with the reason in words: the keys
    the arm's replay block carries at its top level (``informative``, ``informative_reason``)."""
    low, high = useful
    bounds = f"{_percent(low)}-{_percent(high)}"
    if not outcomes:
        return {"correct": 0, "count": 0, "accuracy": None, "useful_range": [low, high], "informative": False,
                "informative_reason": "no replay case was answered"}
    correct = sum(1 for outcome in outcomes if outcome.correct)
    accuracy = correct / len(outcomes)
    inside = low <= accuracy <= high
    said = "inside" if inside else "outside"
    reason = f"accuracy {correct}/{len(outcomes)} ({_percent(accuracy)}) is {said} the useful range {bounds}"
    if not inside:
        reason += (": on this arm nearly every case ends the same way, so paired flips cannot show a change "
                   "that this replay would catch")
    return {"correct": correct, "count": len(outcomes), "accuracy": round(accuracy, 6), "useful_range": [low, high],
            "informative": inside, "informative_reason": reason}


def pair_informative(control: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None) -> tuple[bool, str]:
    """Whether a comparison of two arms' replay blocks can claim anything: False, with the reason, when
    either block is missing, the banks differ, or neither arm's accuracy lies in the useful range."""
    if not isinstance(control, Mapping) or not isinstance(candidate, Mapping):
        missing = "the control" if not isinstance(control, Mapping) else "the candidate"
        return False, f"{missing} ran no tool-call replay"
    hashes = [((block.get("bank") or {}).get("sha256")) for block in (control, candidate)]
    if not hashes[0] or hashes[0] != hashes[1]:
        return False, "the arms replayed different banks (their SHA-256 differ)"
    ranges = [control, candidate]
    if not any(r.get("informative") is True for r in ranges):
        accuracies = ", ".join(_percent(r["accuracy"]) if isinstance(r.get("accuracy"), int | float) else "none"
                               for r in ranges)
        low, high = USEFUL_RANGE
        return False, (f"both arms' accuracy lies outside {_percent(low)}-{_percent(high)} ({accuracies}): the replay "
                       "cannot tell the arms apart, and no discordant pair is not evidence of no change")
    return True, "at least one arm's accuracy lies in the useful range"
