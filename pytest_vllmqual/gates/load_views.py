"""The client's and the server's views of one load level, compared, and the level judged only on
figures that were measured.

The client times each request from its own reads. On a machine whose cores are busy it can read
late and in bursts: its TTFT then includes the wait to be scheduled (one pass on 2 busy cores
saw 37x the server's), and tokens that arrive in one read give a TPOT near zero. The server's
histograms (``vllm:time_to_first_token_seconds``, ``vllm:request_time_per_output_token_seconds``,
``vllm:e2e_request_latency_seconds``), read just before and after the level's counted requests,
see the same requests by the server's clock, to a bucket's resolution.

The rule, per SLO figure: where the server's histogram holds exactly one observation per counted
request, the client's p50 and p95 must each lie within one bucket of the server's bucket for the
same percentile (the client adds its own transport time, and a figure near an edge crosses it).
Where either does not, the views differ beyond the histogram's resolution: the level's record says
so, and that SLO is judged on the server's view instead (``server_metrics``): from the buckets,
the share of requests within the threshold lies between two bounds. A level's goodput then lies
between two bounds too (the share meeting every client-judged SLO, combined with each server-judged
share: at least their sum less one per server share, at most the smallest); it is ``met`` when the
lower bound reaches the minimum, ``missed`` when the upper one does not, and ``not measured``
otherwise. Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.records import FigureSource, LevelJudgement
from pytest_vllmqual.vllm.endpoints import HistogramDelta, MetricsDelta

from .load_stats import SERVER_HISTOGRAMS, RequestFigures, percentile

__all__ = ["COMPARED_PERCENTILES", "SLO_FIGURES", "LevelViews", "bucket_index", "compare_views", "judge_level",
           "share_within"]

SLO_FIGURES: dict[str, tuple[str, float]] = {"ttft_ms": ("ttft", 1000.0), "tpot_ms": ("tpot", 1000.0),
                                             "e2e_s": ("e2e", 1.0)}
"""Each SLO: the short name of its figure (``SERVER_HISTOGRAMS``) and the factor from seconds to its unit."""
COMPARED_PERCENTILES = (50, 95)


def _client_value(request: RequestFigures, short: str) -> float | None:
    return {"ttft": request.ttft_s, "tpot": request.tpot_s, "e2e": request.e2e_s}[short]


def bucket_index(histogram: HistogramDelta, q: float) -> int | None:
    """The index (into ``buckets``) of the bucket holding the ``q``-th percentile; None when empty."""
    if histogram.count <= 0:
        return None
    wanted = histogram.count * q / 100.0
    for index, (_upper, cumulative) in enumerate(histogram.buckets):
        if cumulative >= wanted:
            return index
    return None


def _edge(histogram: HistogramDelta, index: int) -> float:
    """The upper edge of bucket ``index``; 0 below the first, infinity above the last."""
    if index < 0:
        return 0.0
    if index >= len(histogram.buckets):
        return math.inf
    return histogram.buckets[index][0]


def share_within(histogram: HistogramDelta, limit_s: float) -> tuple[float, float]:
    """The share of the histogram's observations at or below ``limit_s``, as bounds from its buckets:
    every observation in a bucket whose upper edge is at or below the limit is within it; those in
    the bucket holding the limit may be."""
    if histogram.count <= 0:
        return (0.0, 0.0)
    sure = max((n for upper, n in histogram.buckets if upper <= limit_s), default=0.0)
    maybe = min((n for upper, n in histogram.buckets if upper >= limit_s), default=histogram.count)
    return (sure / histogram.count, maybe / histogram.count)


def _differs(values: Sequence[float], histogram: HistogramDelta) -> str | None:
    """Why the client's percentiles lie more than one bucket from the server's, or None."""
    for q in COMPARED_PERCENTILES:
        index, client = bucket_index(histogram, q), percentile(values, q)
        if index is None or client is None:
            continue
        low, high = _edge(histogram, index - 2), _edge(histogram, index + 1)
        if not low < client <= high:
            bucket = f"({_edge(histogram, index - 1):g}, {_edge(histogram, index):g}] s"
            return f"the client's p{q} {client:.4f} s is more than one bucket from the server's p{q} bucket {bucket}"
    return None


@dataclass
class LevelViews:
    """Per set SLO, whose view judges it, and where the server's does, the share within its threshold."""

    sources: dict[str, FigureSource] = field(default_factory=dict)
    #: For each SLO judged on the server's view: (lower, upper) bound of the share of requests within it.
    server_shares: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def client_slo_keys(self) -> tuple[str, ...]:
        return tuple(key for key, source in self.sources.items() if source is FigureSource.CLIENT)

    def row(self) -> dict[str, Any]:
        """The level row's fields: each SLO's source, the server's shares, and what differed."""
        out: dict[str, Any] = {f"{SLO_FIGURES[key][0]}_source": str(source) for key, source in self.sources.items()}
        for key, (low, high) in self.server_shares.items():
            short = SLO_FIGURES[key][0]
            out[f"server_{short}_within_slo_pct_low"] = round(100.0 * low, 3)
            out[f"server_{short}_within_slo_pct_high"] = round(100.0 * high, 3)
        out["views_differ"] = "; ".join(self.notes) or None
        return out


def compare_views(requests: Sequence[RequestFigures], delta: MetricsDelta | None,
                  slo: Mapping[str, float]) -> LevelViews:
    """Compare the client's figures of a level's counted requests with the server's histograms over the
    same window, SLO by SLO; an SLO the views disagree on is judged on the server's view."""
    views = LevelViews()
    done = [r for r in requests if r.ok]
    for key, limit in slo.items():
        short, factor = SLO_FIGURES[key]
        views.sources[key] = FigureSource.CLIENT
        histogram = delta.histograms.get(SERVER_HISTOGRAMS[short]) if delta is not None else None
        if histogram is None or int(histogram.count) != len(requests) or len(done) != len(requests):
            continue  # not the server's view of exactly these requests: nothing to compare
        values = [v for r in done if (v := _client_value(r, short)) is not None]
        why = _differs(values, histogram)
        if why is None:
            continue
        views.sources[key] = FigureSource.SERVER_METRICS
        views.server_shares[key] = share_within(histogram, limit / factor)
        views.notes.append(f"{short.upper()}: {why}; judged on the server's {SERVER_HISTOGRAMS[short]}")
    return views


def judge_level(requests: int, errors: int, client_good: int, views: LevelViews,
                min_goodput_pct: float) -> tuple[LevelJudgement, float, float]:
    """The level's judgement and the (lower, upper) bound of its goodput in %: ``client_good`` requests met
    every client-judged SLO; each server-judged SLO adds its share's bounds (see the module's rule)."""
    if requests <= 0 or errors:
        return LevelJudgement.MISSED, 0.0, 0.0
    client = client_good / requests
    shares = list(views.server_shares.values())
    low = max(0.0, client + sum(lo for lo, _ in shares) - len(shares))
    high = min([client, *(hi for _, hi in shares)])
    low_pct, high_pct = round(100.0 * low, 6), round(100.0 * high, 6)  # 1 + 0.99 - 1 is 0.99, not 0.9899...
    if low_pct >= min_goodput_pct:
        return LevelJudgement.MET, low_pct, high_pct
    if high_pct < min_goodput_pct:
        return LevelJudgement.MISSED, low_pct, high_pct
    return LevelJudgement.NOT_MEASURED, low_pct, high_pct
