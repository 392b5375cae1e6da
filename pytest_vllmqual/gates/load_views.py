"""The client's and the server's views of one load level, compared, and the level judged on what
the user waits.

The client times each request from its own reads: that is the latency the user lives with. The
server's histograms (``vllm:time_to_first_token_seconds``, ``vllm:request_time_per_output_token_seconds``,
``vllm:e2e_request_latency_seconds``), read just before and after the level's counted requests,
see the same requests by the engine's clock, to a bucket's resolution; their TTFT and E2E start
only after the API server has parsed, templated and tokenized the request, so they leave out
time every user waits.

The rule, per SLO: TTFT and E2E are judged on the client's figures. TPOT is met only when the
client's figures meet it and the server's histogram does not show a miss (a client that reads
in bursts sees a TPOT smaller than the engine's): where the server's histogram holds exactly one
observation per counted request, the share of requests within the threshold lies between two
bounds from its buckets, and the server shows a miss when even the upper bound is below the
minimum goodput. A miss on the client's figures while the client itself fell behind
(``client.lag``) is ``not measured``: lag only adds to TTFT and E2E, so a pass under lag stands,
but a miss may be the client's own; one that stays a miss with the measured lag taken off every
request's TTFT and E2E is the server's, and missed. The time outside the engine (the client's percentile less
the server's bucket for it, a range) is reported per level. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.client.lag import ClientLag
from pytest_vllmqual.recipe.load_gate_settings import SLOS
from pytest_vllmqual.records import FigureSource, LevelJudgement
from pytest_vllmqual.vllm.endpoints import HistogramDelta, MetricsDelta

from .load_stats import SERVER_HISTOGRAMS, RequestFigures, meets_slo, percentile

__all__ = [
    "COMPARED_PERCENTILES",
    "SLO_FIGURES",
    "LevelViews",
    "bucket_index",
    "compare_views",
    "good_without_lag",
    "judge_level", "lag_reason",
    "outside_engine",
    "share_within",
]

SLO_FIGURES: dict[str, tuple[str, float]] = {slo.key: (slo.figure, slo.per_second) for slo in SLOS}
"""Each SLO: the short name of its figure (``SERVER_HISTOGRAMS``) and the factor from seconds to its unit
(read from the one table of SLOs, ``recipe.load_gate_settings.SLOS``)."""
COMPARED_PERCENTILES = (50, 95)


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
    """Where the client's percentiles lie more than one bucket from the server's, which and by how much."""
    for q in COMPARED_PERCENTILES:
        index, client = bucket_index(histogram, q), percentile(values, q)
        if index is None or client is None:
            continue
        low, high = _edge(histogram, index - 2), _edge(histogram, index + 1)
        if not low < client <= high:
            bucket = f"({_edge(histogram, index - 1):g}, {_edge(histogram, index):g}] s"
            return f"the client's p{q} {client:.4f} s is more than one bucket from the server's p{q} bucket {bucket}"
    return None


def outside_engine(values: Sequence[float], histogram: HistogramDelta) -> dict[int, tuple[float, float] | None]:
    """Per compared percentile, the time outside the engine as a range: the client's value less the upper
    and the lower edge of the server's bucket for that percentile (None where either is missing)."""
    out: dict[int, tuple[float, float] | None] = {}
    for q in COMPARED_PERCENTILES:
        index, client = bucket_index(histogram, q), percentile(values, q)
        upper = None if index is None else _edge(histogram, index)
        if index is None or client is None or upper is None or math.isinf(upper):
            out[q] = None
            continue
        out[q] = (round(client - upper, 6), round(client - _edge(histogram, index - 1), 6))
    return out


@dataclass
class LevelViews:
    """Per set SLO, whose figures judge it (the client's), and where the server's TPOT histogram checks
    it, the share of requests within the threshold; the time outside the engine per figure."""

    sources: dict[str, FigureSource] = field(default_factory=dict)
    #: For each SLO the server's view also judges (TPOT): (lower, upper) bound of the share within it.
    server_shares: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Per figure (``ttft``, ``e2e``) and percentile: the time outside the engine, (low, high) in seconds.
    outside: dict[str, dict[int, tuple[float, float] | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def client_slo_keys(self) -> tuple[str, ...]:
        return tuple(key for key, source in self.sources.items() if source is FigureSource.CLIENT)

    def row(self) -> dict[str, Any]:
        """The level row's fields: each SLO's source, the server's shares, the time outside the engine, and
        where the views differ."""
        out: dict[str, Any] = {f"{SLO_FIGURES[key][0]}_source": str(source) for key, source in self.sources.items()}
        for key, (low, high) in self.server_shares.items():
            short = SLO_FIGURES[key][0]
            out[f"server_{short}_within_slo_pct_low"] = round(100.0 * low, 3)
            out[f"server_{short}_within_slo_pct_high"] = round(100.0 * high, 3)
        for short, ranges in self.outside.items():
            for q, bounds in ranges.items():
                out[f"{short}_outside_engine_p{q}_s_low"] = None if bounds is None else bounds[0]
                out[f"{short}_outside_engine_p{q}_s_high"] = None if bounds is None else bounds[1]
        out["views_differ"] = "; ".join(self.notes) or None
        return out


def _servers_view(delta: MetricsDelta | None, short: str, requests: Sequence[RequestFigures]) -> HistogramDelta | None:
    """The server's histogram of ``short`` where it holds exactly these requests, all completed."""
    histogram = delta.histograms.get(SERVER_HISTOGRAMS[short]) if delta is not None else None
    if histogram is None or int(histogram.count) != len(requests) or not all(r.ok for r in requests):
        return None
    return histogram


def compare_views(requests: Sequence[RequestFigures], delta: MetricsDelta | None,
                  slo: Mapping[str, float]) -> LevelViews:
    """Compare the client's figures of a level's counted requests with the server's histograms over the
    same window: every SLO is judged on the client's figures, TPOT also on the server's histogram."""
    views = LevelViews(sources={key: FigureSource.CLIENT for key in slo})
    for each in SLOS:
        short = each.figure
        histogram = _servers_view(delta, short, requests)
        if histogram is None:
            continue  # not the server's view of exactly these requests: nothing to compare
        values = [v for r in requests if (v := r.figure(short)) is not None]
        if short != "tpot":
            views.outside[short] = outside_engine(values, histogram)
        if short == "tpot" and each.key in slo:
            views.server_shares[each.key] = share_within(histogram, slo[each.key] / each.per_second)
        if (why := _differs(values, histogram)) is not None:
            views.notes.append(f"{short.upper()}: {why} ({SERVER_HISTOGRAMS[short]})")
    return views


def good_without_lag(requests: Sequence[RequestFigures], slo: Mapping[str, float], lag: ClientLag | None) -> int | None:
    """How many requests would meet ``slo`` with each TTFT and E2E shortened by the client's measured lag
    (its reader's oversleep p99; TPOT unchanged, both of its ends move); None where no lag was measured
    as a time (no reader timer), so any miss may be the client's."""
    if lag is None or lag.reader_oversleep_p99_s is None:
        return None
    late = lag.reader_oversleep_p99_s

    def earlier(value: float | None) -> float | None:
        return None if value is None else max(0.0, value - late)

    return sum(1 for r in requests if meets_slo(dataclasses.replace(
        r, ttft_s=earlier(r.ttft_s), e2e_s=earlier(r.e2e_s), last_output_s=earlier(r.last_output_s)), slo))


def lag_reason(lag: ClientLag, unlagged_good: int | None, requests: int) -> str:
    """Why a level is not measured: the client fell behind, and what the level would be without its lag."""
    if unlagged_good is None:
        return f"{lag.fell_behind}; its lag was not measured as a time, so any miss may be its own"
    return (f"{lag.fell_behind}; with that lag taken off each TTFT and E2E, {unlagged_good} of {requests} "
            "requests would have met the SLOs")


def judge_level(requests: int, errors: int, client_good: int, views: LevelViews, min_goodput_pct: float,
                lag: ClientLag | None = None, unlagged_good: int | None = None) -> tuple[LevelJudgement, float, float]:
    """The level's judgement and the (lower, upper) bound of its goodput in %: ``client_good`` requests met
    every SLO by the client's figures; the server's TPOT share bounds it (see the module's rule).

    Met when the upper bound reaches the minimum: the client met it and the server does not show a
    miss. A miss the server's histogram shows is missed; any other miss while the client fell behind
    (``lag``) is not measured, unless it stays a miss with the lag taken off every request
    (``unlagged_good``, from ``good_without_lag``): a miss larger than the lag is the server's."""
    if requests <= 0 or errors:
        return LevelJudgement.MISSED, 0.0, 0.0
    client = client_good / requests
    shares = list(views.server_shares.values())
    low = max(0.0, client + sum(lo for lo, _ in shares) - len(shares))
    high = min([client, *(hi for _, hi in shares)])
    low_pct, high_pct = round(100.0 * low, 6), round(100.0 * high, 6)  # 1 + 0.99 - 1 is 0.99, not 0.9899...
    if high_pct >= min_goodput_pct:
        return LevelJudgement.MET, low_pct, high_pct
    server_missed = any(round(100.0 * hi, 6) < min_goodput_pct for _, hi in shares)
    if not server_missed and lag is not None and lag.fell_behind is not None:
        if unlagged_good is None or round(100.0 * unlagged_good / requests, 6) >= min_goodput_pct:
            return LevelJudgement.NOT_MEASURED, low_pct, high_pct
    return LevelJudgement.MISSED, low_pct, high_pct
