"""The client's and the server's views of a load level: TTFT and E2E are judged on what the user
waited (the client's figures), TPOT on the client's figures and the server's histogram both, and a
miss while the client itself fell behind is not measured. The starved-client numbers are the shape
seen on 2 busy cores: the client's TTFT 37x the server's, its TPOT near zero (the answer read in one
burst); the 525 ms case is a real run's client TTFT against a server bucket of 20-40 ms."""

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


def test_a_starved_clients_figures_are_judged_and_the_difference_named() -> None:
    """Client TTFT 1.85 s against the server's 0.05 s (37x), TPOT 0.1 ms against 30 ms: the user waited
    1.85 s, so that is what the TTFT SLO judges; the row names the difference and the time outside
    the engine. The TPOT the client saw in one burst is checked against the server's histogram."""
    requests = [request(1.85, 0.0001) for _ in range(N)]
    views = compare_views(requests, server(0.050, 0.030, 0.52), SLO)
    assert views.sources == {key: FigureSource.CLIENT for key in SLO}
    row = views.row()
    assert row["ttft_source"] == row["tpot_source"] == row["e2e_source"] == "client"
    assert row["views_differ"].startswith("TTFT: the client's p50 1.8500 s is more than one bucket from the server's "
                                          "p50 bucket (0.04, 0.06] s (vllm:time_to_first_token_seconds)")
    assert "TPOT: the client's p50 0.0001 s" in row["views_differ"]
    assert (row["ttft_outside_engine_p95_s_low"], row["ttft_outside_engine_p95_s_high"]) == (1.79, 1.81)
    assert row["server_tpot_within_slo_pct_low"] == 100.0 and "server_ttft_within_slo_pct_low" not in row
    figures = level_figures(4, requests, 10.0, {key: SLO[key] for key in views.client_slo_keys})
    judgement, low, high = judge_level(figures.requests, figures.errors, figures.good, views, 99.0)
    assert (judgement, low, high) == (LevelJudgement.MET, 100.0, 100.0), "1.85 s is within the 3 s SLO"


def test_a_client_miss_is_missed_whatever_the_engines_histogram_says() -> None:
    """The client waited 7.6 s for each first token, the server's buckets say (2.5, 5] s, the SLO is 3 s."""
    requests = [request(7.6, 0.0001) for _ in range(N)]
    judgement, good = judged(requests, server(2.7, 0.030, 3.2), SLO)
    assert (judgement, good) == (LevelJudgement.MISSED, 0)


def test_a_tpot_threshold_inside_the_servers_bucket_does_not_show_a_miss() -> None:
    """The client saw 320 ms per token, the SLO is 350 ms, the server's TPOTs lie in (0.3, 0.4] s: its
    buckets cannot show a miss, so the client's pass stands (the goodput bounds say how far apart)."""
    requests = [request(0.05, 0.32) for _ in range(N)]
    views = compare_views(requests, server(0.05, 0.32, 5.0), {"tpot_ms": 350.0})
    assert views.server_shares == {"tpot_ms": (0.0, 1.0)}
    figures = level_figures(4, requests, 10.0, {"tpot_ms": 350.0})
    assert judge_level(figures.requests, figures.errors, figures.good, views, 99.0) == (LevelJudgement.MET, 0.0, 100.0)


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
    text = str(proves(gate))
    assert "(tpot_ms, ttft_ms judged on the server's own histograms, to their bucket resolution)" in text
    assert "could not see" not in text, "the client saw every figure; the server's view starts later"
    gate["measurements"] = {"promoted_levels": [1, 2, 4], "slos_also_judged_on_server": ["tpot_ms"]}
    assert ("(tpot_ms also judged on the server's own histograms, to their bucket resolution: met only where "
            "they do not show a miss)") in str(proves(gate))


def judged(requests: list[RequestFigures], delta: MetricsDelta | None, slo: dict[str, float],
           minimum: float = 99.0) -> tuple[LevelJudgement, int]:
    """The level's judgement through the gate's own steps, and how many requests the client saw meet the SLOs."""
    views = compare_views(requests, delta, slo)
    figures = level_figures(2, requests, 10.0, {key: slo[key] for key in views.client_slo_keys})
    return judge_level(figures.requests, figures.errors, figures.good, views, minimum)[0], figures.good


def test_ttft_is_judged_on_what_the_user_waited_not_on_the_engines_histogram() -> None:
    """Every request's first token reached the client after 525 ms; the server's histogram, which starts
    after the API server has templated and tokenized the request, says 20-40 ms. The SLO is 200 ms."""
    requests = [request(0.525, 0.03) for _ in range(N)]
    judgement, good = judged(requests, server(0.03, 0.03, 1.0), {"ttft_ms": 200.0})
    assert good == 0, "no request met a 200 ms TTFT as the user saw it"
    assert judgement is LevelJudgement.MISSED


def test_e2e_is_judged_on_what_the_user_waited() -> None:
    """Client E2E 1.07 s against an SLO of 0.5 s; the server's e2e histogram says under 0.3 s."""
    requests = [RequestFigures.from_times(ok=True, ttft_s=0.525, e2e_s=1.07, completion_tokens=16,
                                          output_times=[0.525 + 0.036 * i for i in range(16)]) for _ in range(N)]
    judgement, good = judged(requests, server(0.03, 0.03, 0.25), {"e2e_s": 0.5})
    assert (judgement, good) == (LevelJudgement.MISSED, 0)


def test_a_tpot_the_client_met_but_the_servers_histogram_missed_is_not_met() -> None:
    """The client saw 95 ms per token (within one bucket of the server's (0.1, 0.15] s), the SLO is 100 ms,
    and the server's histogram holds every request above 100 ms: a client reading in bursts flatters TPOT."""
    requests = [request(0.05, 0.095) for _ in range(N)]
    judgement, good = judged(requests, server(0.05, 0.12, 1.9), {"tpot_ms": 100.0})
    assert good == N, "by the client's clock every request met 100 ms"
    assert judgement is LevelJudgement.MISSED


def test_the_time_outside_the_engine_is_a_range_per_percentile() -> None:
    """Client TTFT 525 ms, the server's bucket (0.02, 0.04] s: 485 to 505 ms of it passed outside the engine
    (the API server's parsing, templating and tokenizing, the network, the client's own reading)."""
    requests = [request(0.525, 0.03) for _ in range(N)]
    row = compare_views(requests, server(0.03, 0.03, 1.0), {"ttft_ms": 200.0}).row()
    for q in (50, 95):
        assert (row.get(f"ttft_outside_engine_p{q}_s_low"), row.get(f"ttft_outside_engine_p{q}_s_high")) == (
            0.485, 0.505)
    e2e_p50 = requests[0].e2e_s
    assert e2e_p50 is not None and row.get("e2e_outside_engine_p50_s_high") == round(e2e_p50 - 0.8, 6)
