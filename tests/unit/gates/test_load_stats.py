"""The load gate's pure logic: percentiles, per-request SLOs and goodput, the closed loop's
mechanics (in-process sends, no server), the search for the highest level at SLO, the
server-histogram cross-check and the recipe's ``gates.load`` rules."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import ROOT, UNIT_DATA

from pytest_vllmqual.client.load_loop import run_closed_loop
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.gates.load_stats import (
    RequestFigures,
    bucket_quantile,
    level_figures,
    meets_slo,
    percentile,
    search_max_level,
    server_cross_check,
)
from pytest_vllmqual.recipe.load_gate_settings import SloSource, load_settings, requests_floor
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.vllm.endpoints import parse_metrics

DATA = UNIT_DATA / "engine_logs"


# -- percentiles, SLOs, goodput -------------------------------------------------------------


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0 and percentile([3.0, 1.0, 2.0], 100) == 3.0


def _request(ttft: float, last_output: float, tokens: int = 11, ok: bool = True, tail: float = 0.0) -> RequestFigures:
    """Tokens evenly spaced from ``ttft`` to ``last_output``; the stream ends ``tail`` later."""
    step = (last_output - ttft) / (tokens - 1)
    return RequestFigures.from_times(ok=ok, ttft_s=ttft, e2e_s=last_output + tail, completion_tokens=tokens,
                                     output_times=[ttft + step * i for i in range(tokens)])


def test_tpot_and_itl_follow_the_stated_formulas() -> None:
    request = _request(0.2, 1.2, tokens=11)
    assert request.tpot_s == pytest.approx(0.1)  # (1.2 - 0.2) / (11 - 1)
    assert len(request.itl_s) == 10 and all(gap == pytest.approx(0.1) for gap in request.itl_s)


def test_tpot_ends_at_the_last_token_not_at_the_end_of_the_stream() -> None:
    """The usage chunk and [DONE] after the last token are in E2E but not in TPOT (vLLM's bench ends a
    request at its last token chunk): on an H200 they took about 15 ms, and counting them made the
    gate's TPOT 28-32% above vLLM bench's on the same server."""
    request = _request(0.010, 0.010 + 31 * 0.0015, tokens=32, tail=0.015)
    assert request.tpot_s == pytest.approx(0.0015)
    assert request.e2e_s == pytest.approx(0.010 + 31 * 0.0015 + 0.015)
    no_times = RequestFigures(ok=True, ttft_s=0.2, e2e_s=1.2, completion_tokens=11)
    assert no_times.tpot_s == pytest.approx(0.1), "without output times, the stream's end"
    assert RequestFigures.from_times(ok=True, ttft_s=0.1, e2e_s=0.1, completion_tokens=1).tpot_s is None


def test_a_request_meets_its_slos_only_when_each_set_figure_is_within() -> None:
    request = _request(0.2, 1.2)  # TTFT 200 ms, TPOT 100 ms, E2E 1.2 s
    assert meets_slo(request, {"ttft_ms": 200})
    assert not meets_slo(request, {"ttft_ms": 199})
    assert meets_slo(request, {"ttft_ms": 250, "tpot_ms": 100, "e2e_s": 1.2})
    assert not meets_slo(request, {"ttft_ms": 250, "tpot_ms": 99})
    assert not meets_slo(request, {"e2e_s": 1.0})
    assert not meets_slo(_request(0.01, 0.02, ok=False), {"ttft_ms": 10_000}), "a failed request meets no SLO"
    single = RequestFigures.from_times(ok=True, ttft_s=0.1, e2e_s=0.1, completion_tokens=1)
    assert not meets_slo(single, {"tpot_ms": 10_000}), "no TPOT figure is no evidence that the SLO held"


def test_goodput_counts_every_request_sent_and_errors_fail_the_level() -> None:
    requests = [_request(0.1, 0.5)] * 18 + [_request(0.9, 1.5)] * 2
    figures = level_figures(4, requests, wall_s=10.0, slo={"ttft_ms": 500})
    assert figures.row["goodput_pct"] == 90.0
    assert figures.row["goodput_req_s"] == pytest.approx(1.8)  # 18 good requests in 10 s
    assert figures.row["output_tok_s"] == pytest.approx(22.0)  # 20 x 11 tokens in 10 s
    assert figures.row["ttft_p50_s"] == pytest.approx(0.1) and figures.row["ttft_p99_s"] == pytest.approx(0.9)
    assert figures.meets(90.0) and not figures.meets(99.0)
    with_error = level_figures(4, [*requests[:18], _request(0.1, 0.5, ok=False)], wall_s=10.0, slo={"ttft_ms": 500})
    assert with_error.errors == 1 and with_error.row["completed"] == 18
    assert not with_error.meets(50.0), "a level with an error never passes, whatever its goodput"


# -- the closed loop ------------------------------------------------------------------------


def test_the_closed_loop_keeps_exactly_level_requests_in_flight() -> None:
    level, count = 4, 24
    barrier = threading.Barrier(level, timeout=5)
    lock = threading.Lock()
    in_flight = [0]
    seen: list[int] = []

    def send(i: int) -> int:
        with lock:
            in_flight[0] += 1
            seen.append(in_flight[0])
        if i < level:
            barrier.wait()  # the first `level` requests are all in flight at once, or this times out
        time.sleep(0.002 * (i % 3))
        with lock:
            in_flight[0] -= 1
        return i

    run = run_closed_loop(level, count, send, warmup=lambda: -1)
    assert run.warmup == -1
    assert sorted(r.result for r in run.requests) == list(range(count))
    assert max(seen) == level and run.max_in_flight == level
    # every start after the ramp-up found the other level - 1 still in flight
    assert run.sustained_starts >= count - 2 * level
    assert all(r.ended_s >= r.started_s for r in run.requests)


def test_the_warm_up_runs_alone_before_the_level_and_is_not_counted() -> None:
    order: list[str] = []
    run = run_closed_loop(2, 3, lambda i: order.append(f"r{i}") or i, warmup=lambda: order.append("warm") or -1)
    assert order[0] == "warm" and len(run.requests) == 3


def test_a_server_gone_stops_new_requests_and_is_raised() -> None:
    sent: list[int] = []

    def send(i: int) -> int:
        sent.append(i)
        if i == 2:
            raise ConnectionError("server gone")
        return i

    with pytest.raises(ConnectionError):
        run_closed_loop(1, 10, send)
    assert sent == [0, 1, 2], "no request starts after the server is gone"


def test_the_loop_reads_the_clock_it_is_given() -> None:
    ticks = iter(float(n) for n in range(100))
    run = run_closed_loop(1, 3, lambda i: i, clock=lambda: next(ticks))
    assert [r.started_s for r in run.requests] == [1.0, 3.0, 5.0]
    assert run.wall_s == 7.0


# -- the search -----------------------------------------------------------------------------


def _capacity(limit: int) -> Any:
    def meets(level: int) -> bool:
        return level <= limit
    return meets


def test_the_search_doubles_then_bisects_to_the_exact_level() -> None:
    result = search_max_level(_capacity(23), ceiling=64, max_steps=10, known={1: True, 8: True})
    assert result.tried == [16, 32, 24, 20, 22, 23]
    assert result.best == 23 and result.first_failing == 24 and result.converged


def test_the_search_stops_at_the_ceiling_and_within_its_steps() -> None:
    at_ceiling = search_max_level(_capacity(1000), ceiling=64, max_steps=10, known={8: True})
    assert at_ceiling.best == 64 and at_ceiling.tried == [16, 32, 64] and at_ceiling.converged
    bounded = search_max_level(_capacity(23), ceiling=64, max_steps=3, known={8: True})
    assert bounded.tried == [16, 32, 24] and bounded.best == 16 and bounded.first_failing == 24
    assert not bounded.converged, "three steps leave 16..24 open: the report says the answer is a bound"


def test_a_failing_promoted_level_bounds_the_search_from_above() -> None:
    result = search_max_level(_capacity(5), ceiling=64, max_steps=10, known={1: True, 8: False})
    assert result.tried == [4, 6, 5] and result.best == 5
    none = search_max_level(_capacity(0), ceiling=64, max_steps=10, known={1: False})
    assert none.best is None and none.tried == [] and none.converged


# -- the server's histograms ----------------------------------------------------------------


def test_the_cross_check_reads_the_servers_histograms() -> None:
    before = parse_metrics((DATA / "metrics_cpu_0.32.0_tp2_before.txt").read_text())
    after = parse_metrics((DATA / "metrics_cpu_0.32.0_tp2_after.txt").read_text())
    check = server_cross_check(after.delta(before))
    assert check["server_ttft_count"] is not None and check["server_ttft_count"] >= 1
    assert isinstance(check["server_ttft_mean_s"], float) and check["server_ttft_mean_s"] > 0
    assert check["server_e2e_mean_s"] >= check["server_ttft_mean_s"]
    assert server_cross_check(None)["server_ttft_mean_s"] is None


def test_bucket_quantile_is_the_upper_bound_of_the_bucket() -> None:
    from pytest_vllmqual.vllm.endpoints import HistogramDelta

    histogram = HistogramDelta(sum=3.0, count=10, buckets=((0.1, 2), (0.5, 9), (1.0, 10), (float("inf"), 10)))
    assert bucket_quantile(histogram, 50) == 0.5
    assert bucket_quantile(histogram, 95) == 1.0
    assert bucket_quantile(HistogramDelta(0.0, 0, ()), 95) is None


# -- the recipe's gates.load ----------------------------------------------------------------


def _recipe_with(tmp_path: Path, load: dict[str, Any]) -> Path:
    data = yaml.safe_load((ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml").read_text())
    data["gates"]["load"] = load
    path = tmp_path / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_settings_are_typed_with_their_defaults(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe_with(tmp_path, {"levels": [4, 1], "ttft_ms": 500}))
    settings = load_settings(recipe.gates)
    assert settings is not None
    assert settings.levels == (1, 4) and settings.requests_per_level == 32 and settings.min_goodput_pct == 99
    assert settings.slo() == {"ttft_ms": 500.0} and settings.slos_set_by is SloSource.NOT_STATED
    assert settings.requests_at(1) == 32 and settings.requests_at(16) == 64 == requests_floor(16)


@pytest.mark.parametrize(("load", "key", "needle"), [
    ({"levels": [1], "ttft_ms": 100, "reqests_per_level": 40}, "gates.load.reqests_per_level", "requests_per_level"),
    ({"levels": [1, 1], "ttft_ms": 100}, "gates.load.levels", "each concurrency level once"),
    ({"levels": [1]}, "gates.load.ttft_ms", "at least one SLO"),
    ({"levels": [16], "ttft_ms": 100, "requests_per_level": 40}, "gates.load.requests_per_level", "requests_per_level: 64"),
    ({"levels": [4], "ttft_ms": 100, "find_max": True}, "gates.load.max_ceiling", "max_ceiling: N"),
    ({"levels": [8], "ttft_ms": 100, "find_max": True, "max_ceiling": 4}, "gates.load.max_ceiling", "max_ceiling: 8"),
    ({"levels": [0], "ttft_ms": 100}, "gates.load.levels.0", "levels.0"),
    ({"levels": [1], "ttft_ms": 100, "min_goodput_pct": 120}, "gates.load.min_goodput_pct", "min_goodput_pct"),
])
def test_impossible_settings_are_refused_with_the_key_and_the_fix(tmp_path: Path, load: dict[str, Any], key: str,
                                                                   needle: str) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(_recipe_with(tmp_path, load))
    assert caught.value.key == key
    assert needle in str(caught.value) and "Fix:" in str(caught.value)


def test_slos_set_by_defaults_to_not_stated_and_only_operator_carries_no_caveat(tmp_path: Path) -> None:
    """A recipe that does not say who set its SLOs is not an operator's target; it says so when it is one."""
    stated = load_settings(load_recipe(_recipe_with(tmp_path, {"levels": [1], "ttft_ms": 500,
                                                               "slos_set_by": "operator"})).gates)
    assert stated is not None and stated.slos_set_by is SloSource.OPERATOR and stated.slos_set_by.caveat == ""
    assert all(source.caveat for source in SloSource if source is not SloSource.OPERATOR)


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures" / "recipes").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_with_a_load_gate_says_who_set_its_slos(path: Path) -> None:
    """The shipped recipes state it in the file: the project's own for the fixture model, placeholders for
    the reference campaign's arms (it measured no load); none claims an operator."""
    load = (yaml.safe_load(path.read_text()).get("gates") or {}).get("load")
    if load is None:
        return
    expected = "project" if path.stem.startswith("tiny-") else "placeholder"
    assert load.get("slos_set_by") == expected


def test_the_api_servers_own_http_duration_of_chat_completions_is_read() -> None:
    """prometheus-fastapi-instrumentator's histogram as vllm 0.32.0 exposes it (tests/unit/data/engine_logs
    holds a real one for /v1/completions): only the chat handler's series is kept, as HTTP_CHAT_DURATION."""
    def body(chat_count: int, chat_sum: float) -> str:
        lines = ["# TYPE http_request_duration_seconds histogram"]
        for handler, count, total in (("/v1/chat/completions", chat_count, chat_sum), ("/tokenize", 7, 0.7)):
            labels = f'handler="{handler}",method="POST"'
            lines += [f'http_request_duration_seconds_bucket{{{labels},le="1.0"}} {count}',
                      f'http_request_duration_seconds_bucket{{{labels},le="+Inf"}} {count}',
                      f"http_request_duration_seconds_count{{{labels}}} {count}",
                      f"http_request_duration_seconds_sum{{{labels}}} {total}"]
        return "\n".join(lines) + "\n"

    check = server_cross_check(parse_metrics(body(34, 20.5)).delta(parse_metrics(body(2, 0.5))))
    assert check.get("server_http_count") == 32 and check.get("server_http_duration_mean_s") == 0.625
    assert server_cross_check(None)["server_http_duration_mean_s"] is None
