"""One answer to one scored item, as an arm gave it: the unit every task-level comparison pairs.

The item bank's questions, an operator's own items and the tool-call replay all end here, so one
set of paired statistics judges them all: two arms are compared item by item, on the items both
answered from the same bank (same hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ItemOutcome"]


@dataclass(frozen=True)
class ItemOutcome:
    """Whether an arm answered one item correctly, and whether its answer could be judged at all.

    ``parsed`` is False when the judge found no answer in the text (no final number, no JSON);
    ``hit_max_tokens`` is True when the answer ended at ``max_tokens`` rather than at a stop. Both
    are counted per family, because a family scored mostly on unparsed answers measures the
    format, not the task.
    """

    item_id: str
    family: str
    correct: bool
    parsed: bool = True
    hit_max_tokens: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "family": self.family, "correct": self.correct,
                "parsed": self.parsed, "hit_max_tokens": self.hit_max_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemOutcome:
        return cls(item_id=str(data["item_id"]), family=str(data["family"]), correct=bool(data["correct"]),
                   parsed=bool(data.get("parsed", True)), hit_max_tokens=bool(data.get("hit_max_tokens", False)))
