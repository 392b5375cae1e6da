"""Each equivalence figure against its threshold, and the verdict, stated so that it can be wrong.

The thresholds are the recipe's ``compare.equivalence``; the defaults come from an external
anchor, llama.cpp's ``llama-perplexity --kl-divergence`` scoreboard for q8_0 against f16 on
Llama-3-8B (Wikitext-2, full vocabulary, second half of each chunk): 97.67% same top token, a mean
PPL ratio of 1.000425 (ln 0.000425), RMS Δp 1.198%, and a mean KL divergence of 0.001355. The
greedy and flip defaults are zero: at temperature 0 on the same checkpoint a hard divergence (a
token outside the control's near ties, the rule of vLLM's own logprob comparisons) or a scored
answer that flipped is a changed answer.

A figure is *within* when its far 95% bound is inside the threshold, *beyond* when its near bound
is outside, else *undecided*. ``equivalent`` needs every exact figure within (a figure not
measured, such as flips with no item scored in both arms, is said, not counted);
``not equivalent`` needs one beyond. The KL figure is a lower bound of the full-vocabulary KL: it
can show a difference (its lower bound above the threshold) and never equivalence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.records import EquivalenceVerdict, FigureStatus

__all__ = ["FIGURES", "FigureCheck", "FigureSpec", "Thresholds", "check_figure", "decide_equivalence", "describe",
           "fmt_figure", "fmt_interval"]


@dataclass(frozen=True)
class Thresholds:
    """One threshold per figure (percent figures in percent)."""

    min_top1_agreement_pct: float = 97.67
    max_abs_ln_ppl_ratio: float = 0.000425
    max_rms_delta_p_pct: float = 1.198
    max_hard_divergence_pct: float = 0.0
    max_flips_pct: float = 0.0
    max_kl_lower_bound: float = 0.001355
    source: str = ("default: llama.cpp q8_0 vs f16 on Llama-3-8B (97.67% same top token, ln PPL ratio 0.000425, "
                   "RMS Δp 1.198%, full-vocabulary KL 0.001355); zero hard divergences and flips")

    @classmethod
    def from_recipe(cls, block: Mapping[str, Any] | None, *, recipe: str = "the control recipe") -> Thresholds:
        """The recipe's ``compare.equivalence`` over the defaults (``recipe`` names it in ``source``)."""
        block = dict(block or {})
        names = [name for name in cls.__dataclass_fields__ if name != "source"]
        set_here = {name: float(block[name]) for name in names if isinstance(block.get(name), int | float)}
        if not set_here:
            return cls()
        return cls(**set_here, source=f"{recipe}'s compare.equivalence"
                   + ("" if len(set_here) == len(names) else " and the defaults"))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class FigureSpec:
    """How one figure is read: its label, threshold, scale, and whether it caps (upper) or floors."""

    key: str
    label: str
    threshold: str
    scale: float
    upper: bool
    absolute: bool = False
    exact: bool = True


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("top1_agreement", "top-1 agreement", "min_top1_agreement_pct", 100.0, upper=False),
    FigureSpec("ln_ppl_ratio", "|ln PPL ratio|", "max_abs_ln_ppl_ratio", 1.0, upper=True, absolute=True),
    FigureSpec("rms_delta_p", "RMS Δp", "max_rms_delta_p_pct", 100.0, upper=True),
    FigureSpec("hard_divergence", "hard-divergence rate", "max_hard_divergence_pct", 100.0, upper=True),
    FigureSpec("flips", "flips", "max_flips_pct", 100.0, upper=True),
    FigureSpec("kl_lower_bound", "KL lower bound", "max_kl_lower_bound", 1.0, upper=True, exact=False),
)


@dataclass(frozen=True)
class FigureCheck:
    """One figure: its point and interval (scaled), threshold, status and the A/A floor."""

    spec: FigureSpec
    point: float | None
    low: float | None
    high: float | None
    threshold: float
    status: FigureStatus
    floor: Mapping[str, Any] | None = None
    within_floor: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"figure": self.spec.key, "label": self.spec.label, "point": self.point, "low": self.low,
                "high": self.high, "threshold": self.threshold, "bound": "upper" if self.spec.upper else "lower",
                "exact": self.spec.exact, "status": self.status.value, "floor": dict(self.floor) if self.floor else None,
                "within_floor": self.within_floor}


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


def check_figure(spec: FigureSpec, interval: Mapping[str, Any] | None, thresholds: Thresholds,
                 floor: Mapping[str, Any] | None = None) -> FigureCheck:
    """One figure against its threshold (and, with a bracket, against the A/A floor)."""
    threshold = float(getattr(thresholds, spec.threshold))
    point, low, high = _scaled(interval, spec.scale)
    bounds = _bounds(spec, low, high)
    if point is None:
        status = FigureStatus.NOT_MEASURED
    elif bounds is None:
        status = FigureStatus.UNDECIDED if spec.exact else FigureStatus.NOT_SHOWN
    else:
        near, far = bounds
        if near > threshold if spec.upper else near < threshold:
            status = FigureStatus.BEYOND
        elif not spec.exact:
            status = FigureStatus.NOT_SHOWN
        elif far <= threshold if spec.upper else far >= threshold:
            status = FigureStatus.WITHIN
        else:
            status = FigureStatus.UNDECIDED
    floor_scaled = None
    within_floor = None
    if floor:
        f_point, f_low, f_high = _scaled(floor, spec.scale)
        floor_scaled = {"point": f_point, "low": f_low, "high": f_high}
        if None not in (low, high, f_low, f_high):
            within_floor = bool(low <= f_high and f_low <= high)  # type: ignore[operator]
    return FigureCheck(spec, point, low, high, threshold, status, floor_scaled, within_floor)


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


def describe(check: FigureCheck) -> str:
    """``top-1 agreement 84.4% [83.1, 85.6] below 97.7% (A/A 100.0%)``: one figure in one line."""
    spec = check.spec
    shown = fmt_interval(spec, check.point, check.low, check.high)
    relation = {FigureStatus.BEYOND: "above" if spec.upper else "below",
                FigureStatus.WITHIN: "within", FigureStatus.UNDECIDED: "straddles",
                FigureStatus.NOT_SHOWN: "not shown above", FigureStatus.NOT_MEASURED: "not measured against"}
    text = f"{spec.label} {shown} {relation[check.status]} {fmt_figure(spec, check.threshold)}"
    if check.floor:
        text += f" (A/A {fmt_figure(spec, check.floor.get('point'))})"
    return text


def decide_equivalence(checks: Sequence[FigureCheck]) -> tuple[EquivalenceVerdict, list[str]]:
    """The verdict over measured figures, and the sentences that carry it (the deciding figures first)."""
    beyond = [c for c in checks if c.status is FigureStatus.BEYOND]
    if beyond:
        return EquivalenceVerdict.NOT_EQUIVALENT, [describe(c) for c in beyond]
    exact = [c for c in checks if c.spec.exact and c.status is not FigureStatus.NOT_MEASURED]
    open_ = [c for c in exact if c.status is not FigureStatus.WITHIN]
    if exact and not open_:
        return EquivalenceVerdict.EQUIVALENT, [describe(c) for c in exact]
    if not exact:
        return EquivalenceVerdict.NOT_MEASURABLE, ["no exact figure was measured"]
    return EquivalenceVerdict.INCONCLUSIVE, [describe(c) for c in open_]
