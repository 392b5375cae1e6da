"""The load gate's arithmetic: per-request figures, percentiles, goodput, the server's
histograms as a cross-check, and the search for the highest level that meets the SLOs.

The formulas are the report's (its ``load.definitions``): ``ttft_s`` is the time to the first
streamed delta carrying output of any kind, ``e2e_s`` the time to the end of the stream,
``tpot_s = (last_output_s - ttft_s) / (completion_tokens - 1)`` per request, where
``last_output_s`` is the time to the last streamed delta carrying output (where ``vllm bench serve``
ends a request's latency: the usage chunk and ``[DONE]`` carry no token), ``itl_s`` every gap
between two streamed chunks that carry output. A request **meets its SLOs** when each of its
own figures is within its threshold (``vllm bench serve --goodput``); **goodput** is the share
of a level's requests that met every SLO (``goodput_pct``), and those requests per second of
the level's wall time (``goodput_req_s``). A failed request never meets an SLO.
Percentiles interpolate linearly between the two nearest ranks (numpy's default, which
``vllm bench serve`` uses). Nothing here does I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.client.results import percentile, tpot_s
from pytest_vllmqual.recipe.load_gate_settings import SLOS
from pytest_vllmqual.records import LevelJudgement
from pytest_vllmqual.vllm.endpoints import HTTP_CHAT_DURATION, HistogramDelta, MetricsDelta

__all__ = ["DEFINITIONS", "PERCENTILES", "SERVER_HISTOGRAMS", "LevelFigures", "RequestFigures", "SearchResult",
           "bucket_quantile", "level_figures", "meets_slo", "percentile", "search_max_level", "server_cross_check"]

PERCENTILES = (50, 95, 99)

DEFINITIONS = {
    "ttft_s": "time from sending the request to the first streamed delta carrying generated output of any kind",
    "tpot_s": ("(last_output_s - ttft_s) / (completion_tokens - 1), per request; last_output_s is the time to the "
               "last streamed delta carrying output, where vllm bench serve ends a request (e2e_s when not recorded)"),
    "itl_s": "each gap between two streamed chunks that carry output, pooled over the level's requests",
    "e2e_s": "time from sending the request to the end of the stream",
    "goodput_pct": ("the share of the level's requests that met every set SLO judged on the client's figures (a "
                    "failed request meets none), in %; where the server's TPOT histogram judged TPOT too, "
                    "goodput_pct_low and goodput_pct_high bound the share that met every SLO on both views"),
    "goodput_req_s": "the requests that met every set SLO, per second of the level's wall time",
    "output_tok_s": "completion tokens of the level's completed requests per second of its wall time",
    "wall_s": "from the first counted request's start to the last one's end (the warm-up is not counted)",
    "percentiles": "linear interpolation between the two nearest ranks (numpy's default)",
}
"""The metric definitions a load report states (its schema carries the same words)."""

SERVER_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
}
"""The server's own histograms read before and after each level (where ``/metrics`` exists)."""


@dataclass(frozen=True)
class RequestFigures:
    """One counted request's figures (None where the request did not produce them)."""

    ok: bool
    ttft_s: float | None
    e2e_s: float | None
    completion_tokens: int | None
    prompt_tokens: int | None = None
    itl_s: tuple[float, ...] = ()
    error_kind: str | None = None
    last_output_s: float | None = None

    @property
    def tpot_s(self) -> float | None:
        """The client's ``tpot_s`` of this request; None for a failed one or fewer than two tokens.
        Without recorded output times, it ends at the stream's end."""
        if not self.ok:
            return None
        end = self.last_output_s if self.last_output_s is not None else self.e2e_s
        return tpot_s(self.completion_tokens, self.ttft_s, end)

    def figure(self, short: str) -> float | None:
        """This request's figure of that short name (``ttft``, ``tpot``, ``e2e``), in seconds."""
        return {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}[short]

    @classmethod
    def from_times(cls, *, ok: bool, ttft_s: float | None, e2e_s: float | None, completion_tokens: int | None,
                   output_times: Sequence[float] | None = None, prompt_tokens: int | None = None,
                   error_kind: str | None = None) -> RequestFigures:
        times = list(output_times or ())
        gaps = tuple(later - earlier for earlier, later in itertools.pairwise(times))
        return cls(ok, ttft_s, e2e_s, completion_tokens, prompt_tokens, gaps, error_kind,
                   last_output_s=times[-1] if times else None)


def meets_slo(request: RequestFigures, slo: Mapping[str, float]) -> bool:
    """Each set SLO holds for this request's own figure; a failed request, or a missing figure, does not."""
    if not request.ok:
        return False
    for each in SLOS:
        if each.key in slo:
            value = request.figure(each.figure)
            if value is None or each.of_seconds(value) > slo[each.key]:
                return False
    return True


def _percentiles(name: str, values: Sequence[float]) -> dict[str, float | None]:
    return {f"{name}_p{q}_s": percentile(values, q) for q in PERCENTILES}


@dataclass
class LevelFigures:
    """One level's public row: counts, percentiles, goodput and throughput."""

    level: int
    requests: int
    errors: int
    good: int
    wall_s: float
    row: dict[str, Any] = field(default_factory=dict)
    #: The level's judgement where the server's view was compared (``load_views.judge_level``).
    judgement: LevelJudgement | None = None

    @property
    def goodput_pct(self) -> float:
        return 100.0 * self.good / self.requests if self.requests else 0.0

    def meets(self, min_goodput_pct: float) -> bool:
        """The level's verdict: goodput at or above the minimum, and no errors (as judged, where judged)."""
        if self.judgement is not None:
            return self.judgement is LevelJudgement.MET
        return self.errors == 0 and self.requests > 0 and self.goodput_pct >= min_goodput_pct


def level_figures(level: int, requests: Sequence[RequestFigures], wall_s: float, slo: Mapping[str, float]) -> LevelFigures:
    """Percentiles over the completed requests; goodput over every request sent."""
    done = [r for r in requests if r.ok]
    good = sum(1 for r in requests if meets_slo(r, slo))
    figures = LevelFigures(level=level, requests=len(requests), errors=len(requests) - len(done), good=good,
                           wall_s=wall_s)
    output = sum(r.completion_tokens or 0 for r in done)
    row: dict[str, Any] = {"level": level, "requests": len(requests), "completed": len(done),
                           "errors": figures.errors, "wall_s": round(wall_s, 4)}
    row.update(_percentiles("ttft", [r.ttft_s for r in done if r.ttft_s is not None]))
    row.update(_percentiles("tpot", [t for r in done if (t := r.tpot_s) is not None]))
    row.update(_percentiles("itl", [gap for r in done for gap in r.itl_s]))
    row.update(_percentiles("e2e", [r.e2e_s for r in done if r.e2e_s is not None]))
    row["goodput_pct"] = round(figures.goodput_pct, 3)
    row["goodput_req_s"] = good / wall_s if wall_s > 0 else None
    row["output_tok_s"] = output / wall_s if wall_s > 0 else None
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    row["prompt_tokens_min"] = min(prompts) if prompts else None
    row["prompt_tokens_max"] = max(prompts) if prompts else None
    figures.row = row
    return figures


def bucket_quantile(histogram: HistogramDelta, q: float) -> float | None:
    """The upper bound of the bucket holding the ``q``-th percentile (a bound, not a value)."""
    if histogram.count <= 0:
        return None
    wanted = histogram.count * q / 100.0
    for upper, cumulative in histogram.buckets:
        if cumulative >= wanted:
            return None if math.isinf(upper) else upper
    return None


def server_cross_check(delta: MetricsDelta | None) -> dict[str, Any]:
    """The server's own view of the level: per histogram its new observations, mean and p95 bucket bound;
    the API server's own mean HTTP duration of the level's chat completions (the engine's E2E plus the
    time the API server spent outside the engine)."""
    out: dict[str, Any] = {}
    for short, name in SERVER_HISTOGRAMS.items():
        histogram = delta.histograms.get(name) if delta is not None else None
        out[f"server_{short}_count"] = int(histogram.count) if histogram is not None else None
        out[f"server_{short}_mean_s"] = histogram.mean if histogram is not None else None
        out[f"server_{short}_p95_le_s"] = bucket_quantile(histogram, 95) if histogram is not None else None
    http = delta.histograms.get(HTTP_CHAT_DURATION) if delta is not None else None
    out["server_http_count"] = int(http.count) if http is not None else None
    out["server_http_duration_mean_s"] = http.mean if http is not None else None
    out["server_preemptions"] = int(delta.counter("vllm:num_preemptions_total")) if delta is not None else None
    return out


@dataclass
class SearchResult:
    """The highest level that met the SLOs, the first that did not, and every level measured."""

    best: int | None
    first_failing: int | None
    ceiling: int
    steps: int
    tried: list[int] = field(default_factory=list)

    @property
    def converged(self) -> bool:
        """The answer is exact: the ceiling met the SLOs, or the next level up did not."""
        if self.best is not None and self.best >= self.ceiling:
            return True
        return self.first_failing is not None and self.first_failing - (self.best or 0) <= 1


def search_max_level(meets: Callable[[int], bool], *, ceiling: int, max_steps: int,
                     known: Mapping[int, bool] | None = None) -> SearchResult:
    """Double from the highest known passing level, then bisect, at most ``max_steps`` measurements.

    ``known`` holds levels already measured (the promoted ones); the search assumes that a
    level that meets the SLOs is not followed by a lower one that does not.
    """
    known = dict(known or {})
    best = max((level for level, ok in known.items() if ok), default=0)
    failing = [level for level, ok in known.items() if not ok and level > best]
    first_failing = min(failing) if failing else None
    result = SearchResult(best=None, first_failing=first_failing, ceiling=ceiling, steps=0)

    def probe(level: int) -> bool:
        result.steps += 1
        result.tried.append(level)
        return meets(level)

    while first_failing is None and best < ceiling and result.steps < max_steps:
        level = min(max(best * 2, 1), ceiling)
        if probe(level):
            best = level
        else:
            first_failing = level
    while first_failing is not None and first_failing - best > 1 and result.steps < max_steps:
        middle = (best + first_failing) // 2
        if probe(middle):
            best = middle
        else:
            first_failing = middle
    result.best = best or None
    result.first_failing = first_failing
    return result
