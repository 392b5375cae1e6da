"""The figures of two arms' probe answers: per position, pooled per chunk, with 95% intervals.

:func:`teacher_forced` pools the positions of each chunk (the independent unit) into sums and
bootstraps over chunks: the KL lower bound (mean, p99, max, coverage), top-1 agreement, ln PPL
ratio, ΔPPL and RMS Δp, overall and per context length. :func:`greedy_figures` compares the
greedy answers prompt by prompt (identical, first divergence, near tie or hard) and gives the
hard-divergence rate over prompts its exact binomial interval (a count of prompts: 0 of 8 is
[0, 36.9%], where a bootstrap would say [0, 0]). Both read the sidecar bodies of :mod:`.runner`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.records import Divergence

from .answers import GreedyStep, compare_paths
from .intervals import Interval, exact_interval, ratio_interval, unit_interval
from .position import Position, compare_position

__all__ = ["ChunkSums", "chunk_sums", "greedy_figures", "kl_histogram", "pooled", "teacher_forced"]

KL_BINS = (0.0, 1e-6, 1e-4, 1e-3, 1e-2, 0.1, 1.0)
"""Upper edges of the per-position KL histogram (the page's distribution); the last bin is open."""


def _position(row: Sequence[Any]) -> Position:
    return Position(int(row[0]), float(row[1]), {int(k): float(lp) for k, lp in row[2]})


@dataclass(frozen=True)
class ChunkSums:
    """One chunk's positions pooled: counts and sums, and its per-position KL values."""

    length: int
    n: int
    kl: float
    coverage: float
    agree: int
    ln_ratio: float
    nll_control: float
    nll_candidate: float
    dp_squares: float
    kl_values: tuple[float, ...]


def chunk_sums(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> ChunkSums:
    """The pooled figures of one chunk answered by both arms (the same token IDs)."""
    figures = [compare_position(_position(r), _position(c))
               for r, c in zip(control["positions"], candidate["positions"], strict=True)]
    return ChunkSums(
        length=int(control["length"]), n=len(figures), kl=sum(f.kl for f in figures),
        coverage=sum(f.coverage for f in figures), agree=sum(1 for f in figures if f.top1_agrees),
        ln_ratio=sum(f.ln_ratio for f in figures), nll_control=sum(f.nll_control for f in figures),
        nll_candidate=sum(f.nll_candidate for f in figures), dp_squares=sum(f.delta_p ** 2 for f in figures),
        kl_values=tuple(f.kl for f in figures))


def _delta_ppl(nll_c: Any, nll_r: Any, n: Any, axis: int = -1) -> Any:
    import numpy as np

    count = n.sum(axis=axis)
    return np.exp(nll_c.sum(axis=axis) / count) - np.exp(nll_r.sum(axis=axis) / count)


def _rms(squares: Any, n: Any, axis: int = -1) -> Any:
    return (squares.sum(axis=axis) / n.sum(axis=axis)) ** 0.5


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def kl_histogram(values: Sequence[float]) -> list[dict[str, Any]]:
    """How many positions fall in each KL bin (≤ edge; the last bin is everything above)."""
    counts = [0] * (len(KL_BINS) + 1)
    for value in values:
        counts[next((i for i, edge in enumerate(KL_BINS) if value <= edge), len(KL_BINS))] += 1
    labels = [f"≤ {edge:g}" for edge in KL_BINS] + [f"> {KL_BINS[-1]:g}"]
    return [{"bin": label, "positions": count} for label, count in zip(labels, counts, strict=True)]


def pooled(sums: Sequence[ChunkSums]) -> dict[str, Any]:
    """Units' sums pooled into every figure with its interval over the units (chunks, or depth windows)."""
    n = [float(s.n) for s in sums]
    values = [v for s in sums for v in s.kl_values]
    intervals: dict[str, Interval] = {
        "kl_lower_bound": ratio_interval([s.kl for s in sums], n),
        "top1_agreement": ratio_interval([float(s.agree) for s in sums], n),
        "ln_ppl_ratio": ratio_interval([s.ln_ratio for s in sums], n),
        "delta_ppl": unit_interval([[s.nll_candidate for s in sums], [s.nll_control for s in sums], n], _delta_ppl),
        "rms_delta_p": unit_interval([[s.dp_squares for s in sums], n], _rms),
        "coverage": ratio_interval([s.coverage for s in sums], n),
    }
    return {"chunks": len(sums), "positions": int(sum(n)),
            "intervals": {key: value.to_dict() for key, value in intervals.items()},
            "kl_p99": round(_quantile(values, 0.99), 6), "kl_max": round(max(values, default=0.0), 6)}


def teacher_forced(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any]:
    """Overall and per context length figures, with the per-position KL histogram."""
    sums = [chunk_sums(r, c) for r, c in zip(control["chunks"], candidate["chunks"], strict=True)]
    if not sums:
        raise ValueError("no chunk was answered by both arms")
    lengths = sorted({s.length for s in sums})
    return {"overall": pooled(sums),
            "by_length": [{"length": length, **pooled([s for s in sums if s.length == length])}
                          for length in lengths],
            "kl_histogram": kl_histogram([v for s in sums for v in s.kl_values])}


def _steps(answer: Mapping[str, Any]) -> list[GreedyStep]:
    return [GreedyStep(int(step[0]), {int(k): float(lp) for k, lp in step[1]}) for step in answer["steps"]]


def greedy_figures(control: Mapping[str, Any], candidate: Mapping[str, Any], *, max_tokens: int) -> dict[str, Any]:
    """Each greedy prompt compared, and the rates over prompts (hard divergence with its exact interval)."""
    rows = []
    for r, c in zip(control["greedy"], candidate["greedy"], strict=True):
        path = compare_paths(_steps(r), _steps(c), max_tokens=max_tokens)
        rows.append({"id": str(r["id"]), "kind": path.kind.value, "position": path.position, "length": path.length})
    hard = sum(1 for row in rows if row["kind"] == Divergence.HARD)
    result: dict[str, Any] = {
        "prompts": len(rows), "identical": sum(1 for row in rows if row["kind"] == Divergence.IDENTICAL),
        "near_ties": sum(1 for row in rows if row["kind"] == Divergence.NEAR_TIE), "hard": hard,
        "answers": rows}
    if rows:
        result["hard_divergence"] = exact_interval(hard, len(rows)).to_dict()
    return result
