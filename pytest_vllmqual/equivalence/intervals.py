"""95% intervals over the independent units (chunks, prompts, items), never over tokens.

Tokens of one chunk share their context and are not independent; resampling them would give
intervals far too narrow. A figure pooled over chunks is a ratio of per-unit sums (a mean over
positions is Σ per-chunk sums / Σ per-chunk counts), resampled unit by unit with scipy's
``bootstrap`` (percentile method, a fixed seed, so a record computed twice says the same). A
figure whose every unit has the same value (an A/A pair that reproduced exactly: all zeros) has
the point as its interval: there is nothing to resample.

A figure that counts events among units (greedy prompts that diverged hard, items that flipped)
has an exact binomial interval instead (Clopper-Pearson): a bootstrap of 0 events is [0, 0], which
would claim far more than 0 of 8 shows; the exact interval of 0 of 8 is [0, 36.9%].
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CONFIDENCE", "Interval", "exact_interval", "ratio_interval", "unit_interval"]

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20261204


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95% interval (``low`` = ``high`` = point when every unit agrees;
    both None with fewer than two units). ``events``: how many units counted, for an exact
    binomial interval (None for a bootstrap)."""

    point: float
    low: float | None
    high: float | None
    units: int
    events: int | None = None

    def far(self, threshold_is_upper: bool) -> float | None:
        """The bound farther from 'no change' for a threshold that caps (upper) or floors the figure."""
        return self.high if threshold_is_upper else self.low

    def near(self, threshold_is_upper: bool) -> float | None:
        return self.low if threshold_is_upper else self.high

    def overlaps(self, other: Interval) -> bool | None:
        """Whether two intervals share a point (None when either has none)."""
        if None in (self.low, self.high, other.low, other.high):
            return None
        return bool(self.low <= other.high and other.low <= self.high)  # type: ignore[operator]

    def to_dict(self, digits: int = 6) -> dict[str, Any]:
        def r(value: float | None) -> float | None:
            return None if value is None else round(value, digits)
        out: dict[str, Any] = {"point": r(self.point), "low": r(self.low), "high": r(self.high), "units": self.units}
        if self.events is not None:
            out.update(events=self.events, method="exact binomial (Clopper-Pearson)")
        return out


def unit_interval(columns: Sequence[Sequence[float]], statistic: Callable[..., Any]) -> Interval:
    """The point and 95% interval of ``statistic(*columns)``, resampling units (rows) together.

    ``statistic`` takes one numpy array per column and an ``axis`` keyword (vectorized over
    resamples). Degenerate data (every unit's row the same, or one unit) does not crash.
    """
    import numpy as np

    arrays = [np.asarray(column, dtype=float) for column in columns]
    units = len(arrays[0]) if arrays else 0
    if units == 0:
        raise ValueError("no units to summarize")
    point = float(statistic(*arrays, axis=-1))
    if units < 2:
        return Interval(point, None, None, units)
    rows = np.stack(arrays, axis=-1)
    if bool(np.all(rows == rows[0])):
        return Interval(point, point, point, units)
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = bootstrap(tuple(arrays), statistic, paired=True, vectorized=True, n_resamples=RESAMPLES,
                           confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if math.isnan(low) or math.isnan(high):
        return Interval(point, point, point, units)
    return Interval(point, min(low, point), max(high, point), units)


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float]) -> Interval:
    """Σ numerators / Σ denominators (a mean over positions or items pooled across units)."""
    def ratio(num: Any, den: Any, axis: int = -1) -> Any:
        return num.sum(axis=axis) / den.sum(axis=axis)
    return unit_interval([numerators, denominators], ratio)


def exact_interval(events: int, units: int) -> Interval:
    """``events`` of ``units`` and its exact binomial (Clopper-Pearson) 95% interval."""
    if units < 1 or not 0 <= events <= units:
        raise ValueError(f"{events} events of {units} units is not a count")
    from scipy.stats import binomtest

    bounds = binomtest(events, units).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return Interval(events / units, float(bounds.low), float(bounds.high), units, events)
