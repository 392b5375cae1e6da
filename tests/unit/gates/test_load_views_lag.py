"""A load level missed while the client itself fell behind: not measured, unless the miss is larger
than the client's measured lag or the server's TPOT histogram shows it (then missed); a pass under
lag stands. (Kept apart from test_load_views.py, whose tests run against the rules before the
client's lag was measured.)"""

from __future__ import annotations

from pytest_vllmqual.client.lag import CPU_SHARE_LIMIT, OVERSLEEP_P99_LIMIT_S, ClientLag
from pytest_vllmqual.gates.load_views import compare_views, good_without_lag, judge_level
from pytest_vllmqual.records import LevelJudgement

from .test_load_views import N, request, server

LAGGING = ClientLag(wall_s=10.0, cpu_share=0.4, reader_oversleep_p99_s=OVERSLEEP_P99_LIMIT_S * 3, reader_timer_samples=900)
KEEPING_UP = ClientLag(wall_s=10.0, cpu_share=0.1, reader_oversleep_p99_s=0.001, reader_timer_samples=900)


def test_a_miss_while_the_client_fell_behind_is_not_measured_and_a_pass_stands() -> None:
    slo = {"ttft_ms": 200.0, "tpot_ms": 100.0}
    views = compare_views([request(0.525, 0.03) for _ in range(N)], server(0.03, 0.03, 1.0), slo)
    assert judge_level(N, 0, 0, views, 99.0, lag=LAGGING)[0] is LevelJudgement.NOT_MEASURED
    assert LAGGING.fell_behind is not None and LAGGING.fell_behind.startswith("the load generator fell behind: ")
    assert judge_level(N, 0, 0, views, 99.0, lag=KEEPING_UP)[0] is LevelJudgement.MISSED
    assert KEEPING_UP.fell_behind is None
    assert judge_level(N, 0, N, views, 99.0, lag=LAGGING)[0] is LevelJudgement.MET, "lag only adds: a pass stands"
    busy = ClientLag(wall_s=10.0, cpu_share=CPU_SHARE_LIMIT + 0.05, reader_oversleep_p99_s=None, reader_timer_samples=0)
    assert judge_level(N, 0, 0, views, 99.0, lag=busy)[0] is LevelJudgement.NOT_MEASURED
    assert judge_level(N, 1, 0, views, 99.0, lag=LAGGING)[0] is LevelJudgement.MISSED, "an error is an error"


def test_a_miss_larger_than_the_measured_lag_is_missed() -> None:
    """The 525 ms case on a client whose reader ran up to 150 ms late (p99): 375 ms is still above a 200 ms
    SLO, so the miss is the server's; against a 400 ms SLO the lag could explain it."""
    requests = [request(0.525, 0.03) for _ in range(N)]
    late = ClientLag(wall_s=10.0, cpu_share=0.05, reader_oversleep_p99_s=0.15, reader_timer_samples=900)
    assert late.fell_behind is not None
    for ttft_ms, expected in ((200.0, LevelJudgement.MISSED), (400.0, LevelJudgement.NOT_MEASURED)):
        slo = {"ttft_ms": ttft_ms}
        views = compare_views(requests, server(0.03, 0.03, 1.0), slo)
        unlagged = good_without_lag(requests, slo, late)
        assert unlagged == (0 if expected is LevelJudgement.MISSED else N)
        assert judge_level(N, 0, 0, views, 99.0, lag=late, unlagged_good=unlagged)[0] is expected
    no_timer = ClientLag(wall_s=10.0, cpu_share=0.95, reader_oversleep_p99_s=None, reader_timer_samples=0)
    assert good_without_lag(requests, {"ttft_ms": 200.0}, no_timer) is None, "no time to take off: any miss may be the client's"


def test_a_tpot_miss_the_servers_histogram_shows_is_missed_under_lag_too() -> None:
    """The server's histogram is the engine's own clock: the client's lag cannot explain its miss."""
    views = compare_views([request(0.05, 0.095) for _ in range(N)], server(0.05, 0.12, 1.9), {"tpot_ms": 100.0})
    assert judge_level(N, 0, N, views, 99.0, lag=LAGGING)[0] is LevelJudgement.MISSED
