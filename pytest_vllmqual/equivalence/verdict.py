"""Each equivalence figure against its threshold, and the verdict, stated so that it can be wrong.

The thresholds are the recipe's ``compare.equivalence``; the defaults come from an external
anchor, llama.cpp's ``llama-perplexity --kl-divergence`` scoreboard for q8_0 against f16 on
Llama-3-8B (Wikitext-2, full vocabulary, second half of each chunk): 97.67% same top token, a mean
PPL ratio of 1.000425 (ln 0.000425), RMS Δp 1.198%, and a mean KL divergence of 0.001355. The
greedy and flip defaults are zero: at temperature 0 on the same checkpoint a hard divergence (a
token outside the control's near ties, the rule of vLLM's own logprob comparisons) or a scored
answer that flipped is a changed answer.

Each figure is measured on independent units: scored chunks (top-1 agreement, ln PPL ratio,
RMS Δp, the KL lower bound; a bootstrap over chunks), greedy prompts (the hard-divergence rate)
and items scored in both arms (flips); the last two count events and carry an exact binomial
(Clopper-Pearson) interval. A figure is *within* when its far 95% bound is inside the threshold,
*beyond* when its near bound is outside, else *undecided*; a counted figure with no event is
within (at a zero threshold no interval could be, so the exact upper bound is printed beside it).
A figure not beyond, measured on fewer units than its minimum (8 scored chunks, 8 greedy prompts,
6 items scored in both arms; the recipe may raise them) has *too few units*.

``equivalent`` needs every exact figure measured and within; one not measured, short of units or
undecided makes the verdict ``inconclusive``, naming it and what it needs; ``not equivalent``
needs one figure beyond, on any number of units (its interval is already as wide as they allow).
The KL figure is a lower bound of the full-vocabulary KL: it can show a difference (its lower
bound above the threshold) and never equivalence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.records import EquivalenceVerdict, FigureStatus

__all__ = ["FIGURES", "FigureCheck", "FigureSpec", "Thresholds", "check_figure", "decide_equivalence", "describe",
           "fmt_figure", "fmt_interval"]


_MINIMUMS = ("min_scored_chunks", "min_greedy_prompts", "min_shared_items")


@dataclass(frozen=True)
class Thresholds:
    """One threshold per figure (percent figures in percent), and the fewest units each figure
    must be measured on before it can be within."""

    min_top1_agreement_pct: float = 97.67
    max_abs_ln_ppl_ratio: float = 0.000425
    max_rms_delta_p_pct: float = 1.198
    max_hard_divergence_pct: float = 0.0
    max_flips_pct: float = 0.0
    max_kl_lower_bound: float = 0.001355
    min_scored_chunks: int = 8
    min_greedy_prompts: int = 8
    min_shared_items: int = 6
    source: str = ("default: llama.cpp q8_0 vs f16 on Llama-3-8B (97.67% same top token, ln PPL ratio 0.000425, "
                   "RMS Δp 1.198%, full-vocabulary KL 0.001355); zero hard divergences and flips; at least 8 "
                   "scored chunks, 8 greedy prompts and 6 items scored in both arms")

    @classmethod
    def from_recipe(cls, block: Mapping[str, Any] | None, *, recipe: str = "the control recipe") -> Thresholds:
        """The recipe's ``compare.equivalence`` over the defaults (``recipe`` names it in ``source``).
        A minimum of units can be raised, never lowered below its default."""
        block = dict(block or {})
        names = [name for name in cls.__dataclass_fields__ if name != "source"]
        given = {name: block[name] for name in names
                 if isinstance(block.get(name), int | float) and not isinstance(block.get(name), bool)}
        if not given:
            return cls()
        default = cls()
        set_here: dict[str, Any] = {name: max(int(value), getattr(default, name)) if name in _MINIMUMS
                                    else float(value) for name, value in given.items()}
        return cls(**set_here, source=f"{recipe}'s compare.equivalence"
                   + ("" if len(set_here) == len(names) else " and the defaults"))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class FigureSpec:
    """How one figure is read: its label, threshold, scale, whether it caps (upper) or floors, its
    units (singular, plural), the threshold field holding their minimum, and how to get more."""

    key: str
    label: str
    threshold: str
    scale: float
    upper: bool
    absolute: bool = False
    exact: bool = True
    unit: tuple[str, str] = ("scored chunk", "scored chunks")
    minimum: str = "min_scored_chunks"
    more: str = "more chunks: gates.equivalence chunks_per_length or context_lengths"

    def units(self, count: int) -> str:
        """``1 scored chunk``, ``8 scored chunks``."""
        return f"{count} {self.unit[0] if count == 1 else self.unit[1]}"


_PROMPTS = ("greedy prompt", "greedy prompts")
_ITEMS = ("item scored in both arms", "items scored in both arms")
FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("top1_agreement", "top-1 agreement", "min_top1_agreement_pct", 100.0, upper=False),
    FigureSpec("ln_ppl_ratio", "|ln PPL ratio|", "max_abs_ln_ppl_ratio", 1.0, upper=True, absolute=True),
    FigureSpec("rms_delta_p", "RMS Δp", "max_rms_delta_p_pct", 100.0, upper=True),
    FigureSpec("hard_divergence", "hard-divergence rate", "max_hard_divergence_pct", 100.0, upper=True,
               unit=_PROMPTS, minimum="min_greedy_prompts",
               more="both arms answer the probe's greedy prompts (eight by default)"),
    FigureSpec("flips", "flips", "max_flips_pct", 100.0, upper=True, unit=_ITEMS, minimum="min_shared_items",
               more="run the functional and quality gates on both arms"),
    FigureSpec("kl_lower_bound", "KL lower bound", "max_kl_lower_bound", 1.0, upper=True, exact=False),
)


@dataclass(frozen=True)
class FigureCheck:
    """One figure: its point and interval (scaled), threshold, status, the A/A floor, and the units
    it was measured on (``events``: how many of them counted, for a figure with an exact interval)."""

    spec: FigureSpec
    point: float | None
    low: float | None
    high: float | None
    threshold: float
    status: FigureStatus
    floor: Mapping[str, Any] | None = None
    within_floor: bool | None = None
    units: int | None = None
    events: int | None = None
    min_units: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"figure": self.spec.key, "label": self.spec.label, "point": self.point, "low": self.low,
                "high": self.high, "threshold": self.threshold, "bound": "upper" if self.spec.upper else "lower",
                "exact": self.spec.exact, "status": self.status.value, "floor": dict(self.floor) if self.floor else None,
                "within_floor": self.within_floor, "units": self.units, "unit": self.spec.unit[1],
                "min_units": self.min_units, "events": self.events,
                "interval": "exact binomial (Clopper-Pearson)" if self.events is not None else "bootstrap over "
                + self.spec.unit[1]}


def _scaled(interval: Mapping[str, Any] | None, scale: float) -> tuple[float | None, float | None, float | None]:
    if not interval:
        return None, None, None
    values = [interval.get(k) for k in ("point", "low", "high")]
    out = [None if v is None else round(float(v) * scale, 6) for v in values]
    return out[0], out[1], out[2]


def _bounds(spec: FigureSpec, low: float | None, high: float | None) -> tuple[float, float] | None:
    """(near, far) bound against the threshold; an absolute figure's near bound is 0 when it straddles 0."""
    if low is None or high is None:
        return None
    if spec.absolute:
        near = 0.0 if low <= 0.0 <= high else min(abs(low), abs(high))
        return near, max(abs(low), abs(high))
    return (low, high) if spec.upper else (high, low)


def _count(interval: Mapping[str, Any] | None, key: str) -> int | None:
    value = (interval or {}).get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _status(spec: FigureSpec, low: float | None, high: float | None, threshold: float,
            events: int | None) -> FigureStatus:
    """Within, beyond or undecided by the interval's bounds; a counted figure with no event is within."""
    bounds = _bounds(spec, low, high)
    if bounds is None:
        return FigureStatus.UNDECIDED if spec.exact else FigureStatus.NOT_SHOWN
    near, far = bounds
    if near > threshold if spec.upper else near < threshold:
        return FigureStatus.BEYOND
    if not spec.exact:
        return FigureStatus.NOT_SHOWN
    if events == 0 or (far <= threshold if spec.upper else far >= threshold):
        return FigureStatus.WITHIN
    return FigureStatus.UNDECIDED


def check_figure(spec: FigureSpec, interval: Mapping[str, Any] | None, thresholds: Thresholds,
                 floor: Mapping[str, Any] | None = None) -> FigureCheck:
    """One figure against its threshold and its minimum units (and, with a bracket, the A/A floor)."""
    threshold = float(getattr(thresholds, spec.threshold))
    minimum = int(getattr(thresholds, spec.minimum))
    point, low, high = _scaled(interval, spec.scale)
    units, events = _count(interval, "units"), _count(interval, "events")
    if point is None:
        status = FigureStatus.NOT_MEASURED
    else:
        status = _status(spec, low, high, threshold, events)
        if spec.exact and status is not FigureStatus.BEYOND and (units or 0) < minimum:
            status = FigureStatus.TOO_FEW
    floor_scaled = None
    within_floor = None
    if floor:
        f_point, f_low, f_high = _scaled(floor, spec.scale)
        floor_scaled = {"point": f_point, "low": f_low, "high": f_high}
        if None not in (low, high, f_low, f_high):
            within_floor = bool(low <= f_high and f_low <= high)  # type: ignore[operator]
    return FigureCheck(spec, point, low, high, threshold, status, floor_scaled, within_floor,
                       units=units if point is not None else (units or 0), events=events, min_units=minimum)


def fmt_figure(spec: FigureSpec, value: float | None) -> str:
    """One value of a figure as it is read: ``84.4%`` for a percent figure, else four significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if spec.scale == 100.0:
        return f"{value:.1f}%"
    return f"{value:.4g}"


def fmt_interval(spec: FigureSpec, point: float | None, low: float | None, high: float | None) -> str:
    """``84.4% [83.1, 85.6]``: a figure's point and its 95% interval (the point alone without one)."""
    shown = fmt_figure(spec, point)
    if low is not None and high is not None:
        shown += f" [{low:.1f}, {high:.1f}]" if spec.scale == 100.0 else f" [{low:.4g}, {high:.4g}]"
    return shown


def _shown(check: FigureCheck) -> str:
    """The figure's value as a sentence shows it: ``2 of 8 greedy prompts, 25.0% [3.2, 65.1]``."""
    shown = fmt_interval(check.spec, check.point, check.low, check.high)
    if check.events is not None and check.units:
        return f"{check.events} of {check.spec.units(check.units)}, {shown}"
    if check.status is FigureStatus.TOO_FEW:
        return f"{shown} on {check.spec.units(check.units or 0)}"
    return shown


def describe(check: FigureCheck) -> str:
    """``top-1 agreement 84.4% [83.1, 85.6] below 97.7% (A/A 100.0%)``: one figure in one line; a
    figure short of evidence says what it needs."""
    spec = check.spec
    more = f"{check.min_units} needed (fix: {spec.more})"
    if check.status is FigureStatus.NOT_MEASURED:
        return f"{spec.label} not measured: {spec.units(check.units or 0)}, at least {more}"
    if check.status is FigureStatus.TOO_FEW:
        return f"{spec.label} {_shown(check)}: fewer than the {more}"
    threshold = fmt_figure(spec, check.threshold)
    if check.status is FigureStatus.WITHIN and check.events == 0 and (check.high or 0.0) > check.threshold:
        text = (f"{spec.label} 0 of {spec.units(check.units or 0)} within {threshold} (no event; the exact 95% "
                f"upper bound is {fmt_figure(spec, check.high)})")
    else:
        relation = {FigureStatus.BEYOND: "above" if spec.upper else "below",
                    FigureStatus.WITHIN: "within", FigureStatus.UNDECIDED: "straddles",
                    FigureStatus.NOT_SHOWN: "not shown above"}
        text = f"{spec.label} {_shown(check)} {relation[check.status]} {threshold}"
    if check.floor:
        text += f" (A/A {fmt_figure(spec, check.floor.get('point'))})"
    return text


def decide_equivalence(checks: Sequence[FigureCheck]) -> tuple[EquivalenceVerdict, list[str]]:
    """The verdict over every figure, and the sentences that carry it (the deciding figures first):
    one beyond decides ``not equivalent``; ``equivalent`` needs every exact figure of ``FIGURES``
    measured within on enough units; a figure missing from ``checks`` counts as not measured."""
    beyond = [c for c in checks if c.status is FigureStatus.BEYOND]
    if beyond:
        return EquivalenceVerdict.NOT_EQUIVALENT, [describe(c) for c in beyond]
    exact = [c for c in checks if c.spec.exact]
    if not any(c.status is not FigureStatus.NOT_MEASURED for c in exact):
        return EquivalenceVerdict.NOT_MEASURABLE, ["no exact figure was measured"]
    named = {c.spec.key for c in exact}
    missing = [f"{spec.label} not measured" for spec in FIGURES if spec.exact and spec.key not in named]
    open_ = [describe(c) for c in exact if c.status is not FigureStatus.WITHIN]
    if open_ or missing:
        return EquivalenceVerdict.INCONCLUSIVE, open_ + missing
    return EquivalenceVerdict.EQUIVALENT, [describe(c) for c in exact]
