"""The client's and the server's views of a load level: where they differ beyond the histogram's
resolution the level's record says so, and no SLO passes or fails on a figure the client could
not measure. The starved-client numbers are the shape seen on 2 busy cores: the client's TTFT
37x the server's, its TPOT near zero (the answer read in one burst)."""

from __future__ import annotations

import math

from pytest_vllmqual.gates.load_stats import SERVER_HISTOGRAMS, RequestFigures, level_figures
from pytest_vllmqual.gates.load_views import compare_views, judge_level, share_within
from pytest_vllmqual.gates.registry import proves
from pytest_vllmqual.records import FigureSource, LevelJudgement
from pytest_vllmqual.vllm.endpoints import HistogramDelta, MetricsDelta

TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_EDGES = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)
SLO = {"ttft_ms": 3000.0, "tpot_ms": 400.0, "e2e_s": 8.0}
N = 32


def histogram(values: list[float], edges: tuple[float, ...]) -> HistogramDelta:
    """A histogram delta of ``values`` over vLLM's bucket edges (cumulative counts, +Inf last)."""
    buckets = tuple((edge, float(sum(v <= edge for v in values))) for edge in (*edges, math.inf))
    return HistogramDelta(sum=sum(values), count=len(values), buckets=buckets)


def server(ttft: float, tpot: float, e2e: float, n: int = N) -> MetricsDelta:
    return MetricsDelta(counters={}, gauges={}, histograms={
        SERVER_HISTOGRAMS["ttft"]: histogram([ttft] * n, TTFT_EDGES),
        SERVER_HISTOGRAMS["tpot"]: histogram([tpot] * n, TPOT_EDGES),
        SERVER_HISTOGRAMS["e2e"]: histogram([e2e] * n, E2E_EDGES)})


def request(ttft: float, tpot: float, tokens: int = 16) -> RequestFigures:
    """``tokens`` output tokens, the first at ``ttft``, then one every ``tpot`` seconds."""
    times = [ttft + tpot * i for i in range(tokens)]
    return RequestFigures.from_times(ok=True, ttft_s=ttft, e2e_s=times[-1] + 0.001, completion_tokens=tokens,
                                     output_times=times)


def test_views_that_agree_leave_every_slo_to_the_client() -> None:
    requests = [request(0.052, 0.031) for _ in range(N)]
    views = compare_views(requests, server(0.050, 0.030, 0.52), SLO)
    assert views.sources == {key: FigureSource.CLIENT for key in SLO} and not views.notes
    assert views.row()["views_differ"] is None and views.row()["ttft_source"] == "client"


def test_a_starved_client_is_named_and_its_figures_are_not_judged() -> None:
    """Client TTFT 1.85 s against the server's 0.05 s (37x), TPOT 0.1 ms against 30 ms."""
    requests = [request(1.85, 0.0001) for _ in range(N)]
    views = compare_views(requests, server(0.050, 0.030, 0.52), SLO)
    assert views.sources == {"ttft_ms": FigureSource.SERVER_METRICS, "tpot_ms": FigureSource.SERVER_METRICS,
                             "e2e_s": FigureSource.SERVER_METRICS}
    row = views.row()
    assert row["ttft_source"] == row["tpot_source"] == "server_metrics"
    assert row["views_differ"].startswith("TTFT: the client's p50 1.8500 s is more than one bucket from the server's "
                                          "p50 bucket (0.04, 0.06] s; judged on the server's "
                                          "vllm:time_to_first_token_seconds")
    assert "TPOT: the client's p50 0.0001 s" in row["views_differ"]
    assert row["server_ttft_within_slo_pct_low"] == 100.0 and row["server_tpot_within_slo_pct_high"] == 100.0
    figures = level_figures(4, requests, 10.0, {key: SLO[key] for key in views.client_slo_keys})
    judgement, low, high = judge_level(figures.requests, figures.errors, figures.good, views, 99.0)
    assert (judgement, low, high) == (LevelJudgement.MET, 100.0, 100.0), "judged on the server's view: it met"


def test_the_servers_view_can_fail_a_level_the_client_could_not_see() -> None:
    """The client reads late, but the server says every request's TTFT was 6 s: above the 3 s SLO."""
    requests = [request(30.0, 0.0001) for _ in range(N)]
    views = compare_views(requests, server(6.0, 0.030, 6.6), SLO)
    assert views.server_shares["ttft_ms"] == (0.0, 0.0)
    figures = level_figures(4, requests, 10.0, {key: SLO[key] for key in views.client_slo_keys})
    assert judge_level(figures.requests, figures.errors, figures.good, views, 99.0)[0] is LevelJudgement.MISSED


def test_a_threshold_inside_the_servers_bucket_is_not_measured() -> None:
    """The server's TTFTs lie in (2.5, 5.0], the SLO is 3 s: the buckets cannot tell, so neither does the gate."""
    requests = [request(7.6, 0.0001) for _ in range(N)]
    views = compare_views(requests, server(2.7, 0.030, 3.2), SLO)
    assert views.sources["e2e_s"] is FigureSource.CLIENT, "7.6 s is within a bucket of the server's (2.5, 5] s"
    assert views.sources["ttft_ms"] is FigureSource.SERVER_METRICS and views.server_shares["ttft_ms"] == (0.0, 1.0)
    figures = level_figures(4, requests, 10.0, {key: SLO[key] for key in views.client_slo_keys})
    judgement, low, high = judge_level(figures.requests, figures.errors, figures.good, views, 99.0)
    assert judgement is LevelJudgement.NOT_MEASURED and (low, high) == (0.0, 100.0)


def test_no_comparison_without_the_servers_view_of_exactly_these_requests() -> None:
    requests = [request(1.85, 0.0001) for _ in range(N)]
    assert compare_views(requests, None, SLO).sources == {key: FigureSource.CLIENT for key in SLO}
    other_traffic = server(0.050, 0.030, 0.52, n=N + 5)
    assert compare_views(requests, other_traffic, SLO).sources["ttft_ms"] is FigureSource.CLIENT


def test_share_within_bounds_by_bucket_edges() -> None:
    values = [0.03] * 6 + [0.07] * 4
    assert share_within(histogram(values, TTFT_EDGES), 0.06) == (0.6, 0.6), "a limit on an edge is exact"
    assert share_within(histogram(values, TTFT_EDGES), 0.05) == (0.6, 0.6)
    assert share_within(histogram(values, TTFT_EDGES), 0.07) == (0.6, 1.0), "inside a bucket: bounds"
    assert judge_level(10, 1, 10, compare_views([], None, {}), 50.0)[0] is LevelJudgement.MISSED


def test_the_load_gate_proves_names_slos_judged_on_the_server() -> None:
    gate = {"gate": "load", "outcome": "passed", "thresholds": {"ttft_ms": 3000, "min_goodput_pct": 99},
            "measurements": {"promoted_levels": [1, 2, 4], "slos_judged_on_server": ["tpot_ms", "ttft_ms"]}}
    assert ("(tpot_ms, ttft_ms judged on the server's own histograms, to their bucket "
            "resolution: the client could not see them)") in str(proves(gate))
