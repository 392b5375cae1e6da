"""Paired task statistics: did the candidate answer the same items worse than the control, by more than a margin?

Both arms answer the same items; each item is correct or not in each arm, so the arms are paired
item by item (items only one arm answered are counted, not compared). Of the n paired items,
a = correct in both, b = correct in the control only (the candidate lost it), c = correct in the
candidate only, d = wrong in both.

- **Accuracy** per arm, with its exact (Clopper-Pearson) 95% interval.
- **Flips** b and c, with the exact McNemar p: the two-sided binomial test of b out of b + c at
  0.5 (1 when nothing flipped).
- **The paired difference** in accuracy, candidate − control = (c − b) / n, with Newcombe's hybrid
  score interval for paired proportions (Newcombe 1998, method 10: the Wilson score interval of
  each arm's accuracy, combined with the correlation of the two, phi, corrected as Newcombe
  prescribes). Two-sided 95%.
- **Non-inferiority** at a margin of δ points: the candidate is *non-inferior* when the upper bound
  of (control − candidate) lies below δ, *inferior* when its lower bound lies above δ (the loss
  exceeds the margin, on any number of items), else *inconclusive*.
- **The smallest difference the run could detect**: Connor's (1987) sample size for McNemar's test,
  solved for the difference, at the observed discordant rate (b + c) / n, α 0.05 two-sided, power
  0.8. With no discordant pair the observed rate is 0 and the formula would claim any difference
  detectable; the exact 95% upper bound of the discordant rate (3.7 / n for large n) stands in, and
  the figure says so. "No change detected" is never "no change": this is the change the run
  could have missed.

Everything here is arithmetic on outcomes (no I/O), so a comparison recomputes it offline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from pytest_vllmqual.words import TaskVerdict

from .intervals import CONFIDENCE, Interval, exact_interval
from .outcomes import ItemOutcome

__all__ = ["ALPHA", "POWER", "USEFUL_ACCURACY", "Detectable", "PairedCheck", "PairedTable", "Pairing",
           "TaskSettings", "check_table", "connor_items", "detectable_difference", "judge_outcomes", "mcnemar_exact",
           "newcombe_paired", "pair_outcomes", "wilson_interval"]

ALPHA = 0.05
POWER = 0.8
USEFUL_ACCURACY = (0.2, 0.8)
"""Accuracy at which answers can flip both ways: a block whose arms both lie outside it and whose
answers never flipped cannot tell the arms apart, so it is not claimed non-inferior."""

_Z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)
_OVERALL = "overall"


def wilson_interval(events: int, units: int, z: float = _Z) -> tuple[float, float]:
    """Wilson's score interval of ``events`` of ``units`` (the building block of Newcombe's interval)."""
    if units < 1 or not 0 <= events <= units:
        raise ValueError(f"{events} events of {units} units is not a count")
    p, z2 = events / units, z * z
    centre = (2 * events + z2) / (2 * (units + z2))
    half = z * math.sqrt(z2 + 4 * events * (1 - p)) / (2 * (units + z2))
    return max(0.0, centre - half), min(1.0, centre + half)


def _phi(a: int, b: int, c: int, d: int) -> float:
    """Newcombe's corrected phi: 0 when a margin is empty; (ad − bc − n/2) / √(margins) when ad − bc
    exceeds n/2, 0 when it lies in [0, n/2], the plain phi when ad − bc is negative."""
    n = a + b + c + d
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        return 0.0
    cross = a * d - b * c
    if cross > n / 2:
        return (cross - n / 2) / math.sqrt(margins)
    return 0.0 if cross >= 0 else cross / math.sqrt(margins)


def newcombe_paired(a: int, b: int, c: int, d: int, z: float = _Z) -> tuple[float, float, float]:
    """(point, low, high) of p1 − p2 for paired proportions, p1 = (a + b)/n and p2 = (a + c)/n:
    Newcombe's (1998) method 10, the hybrid score interval with the phi correction."""
    n = a + b + c + d
    if min(a, b, c, d) < 0 or n == 0:
        raise ValueError(f"({a}, {b}, {c}, {d}) is not a paired table")
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    phi = _phi(a, b, c, d)
    down = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    up = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    point = p1 - p2
    return point, max(-1.0, point - down), min(1.0, point + up)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of b out of b + c at p = 0.5 (1.0 when b + c = 0)."""
    if b < 0 or c < 0:
        raise ValueError("flip counts cannot be negative")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(min(1.0, binomtest(b, b + c, 0.5, alternative="two-sided").pvalue))


def _z_pair(alpha: float, power: float) -> tuple[float, float]:
    return NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)


def connor_items(difference: float, discordant_rate: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """Connor's (1987) paired sample size: the items McNemar's test needs to detect ``difference``
    (a proportion) at ``discordant_rate``, two-sided ``alpha`` and ``power``."""
    if not 0 < difference <= discordant_rate <= 1:
        raise ValueError(f"a difference of {difference} cannot arise at a discordant rate of {discordant_rate}")
    z_a, z_b = _z_pair(alpha, power)
    return float((z_a * math.sqrt(discordant_rate) + z_b * math.sqrt(discordant_rate - difference ** 2)) ** 2
                 / difference ** 2)


def detectable_difference(items: int, discordant_rate: float, *, alpha: float = ALPHA,
                          power: float = POWER) -> float | None:
    """Connor's formula solved for the difference: the smallest difference (a proportion) that
    ``items`` paired items detect at ``discordant_rate``; None when too few items for the formula."""
    if items < 1 or not 0 < discordant_rate <= 1:
        return None
    z_a, z_b = _z_pair(alpha, power)
    # n·δ² = (z_a·√ψ + z_b·√(ψ − δ²))², solved for δ: the larger root of a quadratic.
    room = discordant_rate * (items + z_b ** 2 - z_a ** 2)
    if room <= 0:
        return None
    delta = (z_a * math.sqrt(discordant_rate * items) + z_b * math.sqrt(room)) / (items + z_b ** 2)
    return delta if delta * delta <= discordant_rate else None


@dataclass(frozen=True)
class Detectable:
    """The smallest difference (in points) the run could detect, and the discordant rate it rests on."""

    points: float | None
    discordant_rate: float
    observed: bool

    def to_dict(self) -> dict[str, Any]:
        basis = ("the observed discordant rate" if self.observed else
                 "no discordant pair: the exact 95% upper bound of the discordant rate")
        return {"points": None if self.points is None else round(self.points, 3),
                "discordant_rate": round(self.discordant_rate, 6), "basis": basis, "alpha": ALPHA, "power": POWER,
                "method": "Connor (1987) sample size for McNemar's test, solved for the difference"}


@dataclass(frozen=True)
class PairedTable:
    """The paired 2×2 table: a both correct, b control only, c candidate only, d both wrong."""

    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0

    @property
    def n(self) -> int:
        return self.a + self.b + self.c + self.d

    def __add__(self, other: PairedTable) -> PairedTable:
        return PairedTable(self.a + other.a, self.b + other.b, self.c + other.c, self.d + other.d)

    @classmethod
    def of(cls, pairs: Iterable[tuple[bool, bool]]) -> PairedTable:
        """(control correct, candidate correct) per item → the table."""
        cells = [0, 0, 0, 0]
        for control, candidate in pairs:
            cells[(0 if control else 2) + (0 if candidate else 1)] += 1
        return cls(cells[0], cells[1], cells[2], cells[3])

    def detectable(self) -> Detectable:
        """Connor's detectable difference at this table's discordant rate (its exact upper bound when 0)."""
        flipped = self.b + self.c
        observed = flipped > 0
        rate = flipped / self.n if observed else float(exact_interval(0, self.n).high or 0.0)
        delta = detectable_difference(self.n, rate)
        return Detectable(None if delta is None else 100 * delta, rate, observed)


@dataclass(frozen=True)
class Shares:
    """One arm's answers in one family: how many, how many unparsed, how many ended at ``max_tokens``."""

    answers: int = 0
    unparsed: int = 0
    hit_max_tokens: int = 0

    def pct(self, count: int) -> float:
        return 100 * count / self.answers if self.answers else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"answers": self.answers, "unparsed_pct": round(self.pct(self.unparsed), 3),
                "hit_max_tokens_pct": round(self.pct(self.hit_max_tokens), 3)}


def _shares(outcomes: Iterable[ItemOutcome]) -> Shares:
    listed = list(outcomes)
    return Shares(len(listed), sum(not o.parsed for o in listed), sum(o.hit_max_tokens for o in listed))


@dataclass(frozen=True)
class Pairing:
    """One family's (or the whole block's) pairs, what only one arm answered, and each arm's shares."""

    table: PairedTable
    unpaired_control: int
    unpaired_candidate: int
    shares: Mapping[str, Shares]


def _by_id(outcomes: Sequence[ItemOutcome], role: str) -> dict[str, ItemOutcome]:
    found: dict[str, ItemOutcome] = {}
    for outcome in outcomes:
        if outcome.item_id in found:
            raise ValueError(f"the {role} answered item {outcome.item_id!r} twice")
        found[outcome.item_id] = outcome
    return found


def pair_outcomes(control: Sequence[ItemOutcome], candidate: Sequence[ItemOutcome]) -> dict[str, Pairing]:
    """Per family (sorted): the items both arms answered, paired by item id, and the rest counted.
    An item id answered twice by one arm, or under two families, is not the same bank: ValueError."""
    left, right = _by_id(control, "control"), _by_id(candidate, "candidate")
    for item_id in left.keys() & right.keys():
        if left[item_id].family != right[item_id].family:
            raise ValueError(f"item {item_id!r} is in family {left[item_id].family!r} for the control and "
                             f"{right[item_id].family!r} for the candidate")
    families = sorted({o.family for o in left.values()} | {o.family for o in right.values()})
    out: dict[str, Pairing] = {}
    for family in families:
        mine = {k: o for k, o in left.items() if o.family == family}
        theirs = {k: o for k, o in right.items() if o.family == family}
        shared = sorted(mine.keys() & theirs.keys())
        table = PairedTable.of((mine[k].correct, theirs[k].correct) for k in shared)
        out[family] = Pairing(table, len(mine) - len(shared), len(theirs) - len(shared),
                              {"control": _shares(mine.values()), "candidate": _shares(theirs.values())})
    return out


@dataclass(frozen=True)
class TaskSettings:
    """The recipe's ``compare`` settings of the task comparison, over the defaults."""

    non_inferiority_margin_points: float = 3.0
    family_blocks: bool = False
    min_items_per_family: int = 30
    max_unparsed_pct: float = 25.0
    max_hit_max_tokens_pct: float = 25.0
    source: str = "defaults"

    @classmethod
    def from_recipe(cls, compare: Mapping[str, Any] | None, *, recipe: str = "the control recipe") -> TaskSettings:
        """The task keys of a recipe's ``compare`` block (anything else in it is ignored); the minimum
        of items can be raised, never lowered below its default."""
        block = dict(compare or {})
        given: dict[str, Any] = {}
        for name, kind in (("non_inferiority_margin_points", float), ("min_items_per_family", int),
                           ("max_unparsed_pct", float), ("max_hit_max_tokens_pct", float)):
            value = block.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                given[name] = kind(value)
        if isinstance(block.get("family_blocks"), bool):
            given["family_blocks"] = block["family_blocks"]
        if not given:
            return cls()
        if "min_items_per_family" in given:  # raised, never lowered
            given["min_items_per_family"] = max(given["min_items_per_family"], cls.min_items_per_family)
        return cls(**given, source=f"{recipe}'s compare" + ("" if len(given) == 5 else " and the defaults"))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _points(interval: tuple[float, float, float]) -> dict[str, float]:
    point, low, high = interval  # + 0.0: a negated zero prints as 0.0, not -0.0
    return {"point": round(100 * point, 3) + 0.0, "low": round(100 * low, 3) + 0.0, "high": round(100 * high, 3) + 0.0}


def _pct(interval: Interval) -> dict[str, Any]:
    return {"point": round(100 * interval.point, 3), "low": round(100 * (interval.low or 0.0), 3),
            "high": round(100 * (interval.high or 0.0), 3), "correct": interval.events, "items": interval.units,
            "method": "exact binomial (Clopper-Pearson)"}


@dataclass(frozen=True)
class PairedCheck:
    """One family (or the overall) of one block: its statistics and its non-inferiority status."""

    name: str
    status: TaskVerdict
    reason: str
    pairing: Pairing
    margin_points: float
    min_items: int
    statistics: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        table = self.pairing.table
        return {"family": self.name, "status": self.status.value, "reason": self.reason, "paired": table.n,
                "unpaired": {"control": self.pairing.unpaired_control, "candidate": self.pairing.unpaired_candidate},
                "min_items": self.min_items, "margin_points": self.margin_points,
                "shares": {role: s.to_dict() for role, s in self.pairing.shares.items()},
                **({"table": {"a": table.a, "b": table.b, "c": table.c, "d": table.d}} if table.n else {}),
                **self.statistics}


def _statistics(table: PairedTable) -> dict[str, Any]:
    control_minus = newcombe_paired(table.a, table.b, table.c, table.d)
    point, low, high = control_minus
    return {
        "accuracy_pct": {"control": _pct(exact_interval(table.a + table.b, table.n)),
                         "candidate": _pct(exact_interval(table.a + table.c, table.n))},
        "b": table.b, "c": table.c, "mcnemar_p": round(mcnemar_exact(table.b, table.c), 6),
        "difference_points": {"candidate_minus_control": _points((-point, -high, -low)),
                              "control_minus_candidate": _points(control_minus),
                              "method": "Newcombe (1998) hybrid score interval for paired proportions, "
                                        "method 10, 95% two-sided"},
        "detectable_difference": table.detectable().to_dict(),
    }


def _caps(pairing: Pairing, settings: TaskSettings) -> str | None:
    """Why a family is not measured: an arm's unparsed or truncated answers over the caps (None when within)."""
    for role, shares in pairing.shares.items():
        for count, cap, what, key in ((shares.unparsed, settings.max_unparsed_pct, "could not be parsed",
                                       "max_unparsed_pct"),
                                      (shares.hit_max_tokens, settings.max_hit_max_tokens_pct, "ended at max_tokens",
                                       "max_hit_max_tokens_pct")):
            if shares.answers and shares.pct(count) > cap:
                return (f"{shares.pct(count):.1f}% of the {role}'s {shares.answers} answers {what} "
                        f"(cap {cap:g}%: compare.{key}): the accuracy would measure the format, not the task")
    return None


def _status(table: PairedTable, stats: Mapping[str, Any], settings: TaskSettings) -> tuple[TaskVerdict, str]:
    """Inferior on any number of items; non-inferior only on enough items that can tell the arms apart."""
    margin = settings.non_inferiority_margin_points
    gap = stats["difference_points"]["control_minus_candidate"]
    shown = f"control − candidate {gap['point']:+.1f} points [{gap['low']:+.1f}, {gap['high']:+.1f}]"
    if gap["low"] > margin:
        return TaskVerdict.INFERIOR, f"{shown}: the lower bound is above the {margin:g}-point margin"
    if gap["high"] >= margin:
        return TaskVerdict.INCONCLUSIVE, f"{shown}: the upper bound is not below the {margin:g}-point margin"
    if table.n < settings.min_items_per_family:
        return TaskVerdict.TOO_FEW, (f"{shown} on {table.n} paired items, fewer than the "
                                     f"{settings.min_items_per_family} needed (compare.min_items_per_family)")
    accuracy = stats["accuracy_pct"]
    low, high = (100 * bound for bound in USEFUL_ACCURACY)
    outside = all(not low <= accuracy[role]["point"] <= high for role in ("control", "candidate"))
    if outside and table.b + table.c == 0:
        return TaskVerdict.INCONCLUSIVE, (
            f"no answer flipped and both arms are outside {low:g}-{high:g}% (control "
            f"{accuracy['control']['point']:.1f}%, candidate {accuracy['candidate']['point']:.1f}%): these items "
            "cannot tell the arms apart")
    return TaskVerdict.NON_INFERIOR, f"{shown}: the upper bound is below the {margin:g}-point margin"


def check_table(name: str, pairing: Pairing, settings: TaskSettings) -> PairedCheck:
    """One family (or the overall): not measured over the caps or with no paired item, else judged."""
    def made(status: TaskVerdict, reason: str, stats: Mapping[str, Any] | None = None) -> PairedCheck:
        return PairedCheck(name, status, reason, pairing, settings.non_inferiority_margin_points,
                           settings.min_items_per_family, stats or {})
    over = _caps(pairing, settings)
    if over is not None:
        return made(TaskVerdict.NOT_MEASURED, over)
    if pairing.table.n == 0:
        return made(TaskVerdict.NOT_MEASURED, "no item was answered by both arms")
    stats = _statistics(pairing.table)
    status, reason = _status(pairing.table, stats, settings)
    return made(status, reason, stats)


def _pooled(pairings: Iterable[Pairing]) -> Pairing:
    """The families' pairs as one table, their unpaired items and answers summed."""
    listed = list(pairings)
    table = sum((p.table for p in listed), PairedTable())
    shares = {role: Shares(sum(p.shares[role].answers for p in listed), sum(p.shares[role].unparsed for p in listed),
                           sum(p.shares[role].hit_max_tokens for p in listed)) for role in ("control", "candidate")}
    return Pairing(table, sum(p.unpaired_control for p in listed), sum(p.unpaired_candidate for p in listed), shares)


def judge_outcomes(control: Sequence[ItemOutcome], candidate: Sequence[ItemOutcome],
                   settings: TaskSettings) -> tuple[list[PairedCheck], PairedCheck]:
    """Every family's check and the overall's. The overall pools the families within the caps (a
    family over a cap is left out of it, as it is not measured itself)."""
    pairings = pair_outcomes(control, candidate)
    families = [check_table(name, pairing, settings) for name, pairing in pairings.items()]
    pooled = _pooled(p for p in pairings.values() if _caps(p, settings) is None)
    if pooled.table.n == 0:
        why = "no family was measured" if pairings else "neither arm answered an item"
        return families, PairedCheck(_OVERALL, TaskVerdict.NOT_MEASURED, why, pooled,
                                     settings.non_inferiority_margin_points, settings.min_items_per_family)
    return families, check_table(_OVERALL, pooled, settings)
