"""Engine facts over HTTP: ``/metrics``, ``/version`` and ``/v1/models`` of a running server.

``parse_metrics`` reads a ``/metrics`` body through ``prometheus_client``'s parser and keeps
the ``vllm:*`` series summed over label sets (with older releases' names read as the current
ones); snapshots subtract into the delta one request window added. ``fetch_engine_endpoints``
reads what the server reports about its identity (version, served models) plus one snapshot.
Read-only; this module imports nothing from pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pytest_vllmqual.errors import EngineEndpointError, MetricsParseError

__all__ = [
    "HTTP_CHAT_DURATION",
    "EndpointFacts",
    "HistogramDelta",
    "HistogramSnapshot",
    "MetricsDelta",
    "MetricsSnapshot",
    "fetch_engine_endpoints",
    "parse_metrics",
]

_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# /metrics
# --------------------------------------------------------------------------------------------

# Older releases' names, read as the current ones when the current one is absent.
_METRIC_ALIASES = {
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",  # ≤0.10.1
}


def _alias(table: dict[str, _T], current: str, legacy: str) -> bool:
    if current not in table and legacy in table:
        table[current] = table[legacy]
        return True
    return False


def _le(value: str) -> float:
    return math.inf if value in ("+Inf", "Inf", "inf") else float(value)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram summed over its label sets: cumulative bucket counts, sum and count."""

    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sum": self.sum,
            "count": self.count,
            "mean": self.mean,
            "buckets": [["+Inf" if math.isinf(le) else le, n] for le, n in self.buckets],
        }


@dataclass(frozen=True)
class HistogramDelta(HistogramSnapshot):
    """What one window of requests added to a histogram; ``mean`` is the mean of the new
    observations (e.g. the server-side TTFT of one request)."""


@dataclass(frozen=True)
class MetricsDelta:
    """``later - earlier`` for counters and histograms; gauges as they were at ``later``."""

    counters: dict[str, float]
    histograms: dict[str, HistogramDelta]
    gauges: dict[str, float]
    counter_resets: tuple[str, ...] = ()

    def counter(self, name: str) -> float:
        """The increase of a counter; 0.0 when neither snapshot had it."""
        return self.counters.get(name, 0.0)

    def histogram_mean(self, name: str) -> float | None:
        delta = self.histograms.get(name)
        return delta.mean if delta is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "histograms": {name: h.to_dict() for name, h in self.histograms.items()},
            "gauges": dict(self.gauges),
            "counter_resets": list(self.counter_resets),
        }


@dataclass(frozen=True)
class MetricsSnapshot:
    """The ``vllm:*`` series of one ``/metrics`` scrape, summed over label sets (engines, models)."""

    counters: dict[str, float]
    gauges: dict[str, float]
    histograms: dict[str, HistogramSnapshot]
    cache_config_info: dict[str, str]
    request_success_by_reason: dict[str, float] = field(default_factory=dict)
    aliases_used: dict[str, str] = field(default_factory=dict)

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def gauge(self, name: str) -> float | None:
        return self.gauges.get(name)

    @property
    def kv_cache_size_tokens(self) -> int | None:
        """``cache_config_info``'s ``kv_cache_size_tokens`` (≥0.27), else None."""
        value = self.cache_config_info.get("kv_cache_size_tokens")
        return int(float(value)) if value not in (None, "None", "") else None

    def delta(self, earlier: MetricsSnapshot) -> MetricsDelta:
        """Counter and histogram increases since ``earlier``; a decrease is recorded as a reset."""
        counters: dict[str, float] = {}
        resets: list[str] = []
        for name, value in self.counters.items():
            before = earlier.counters.get(name, 0.0)
            if value < before:
                resets.append(name)
                counters[name] = value
            else:
                counters[name] = value - before
        histograms: dict[str, HistogramDelta] = {}
        for name, hist in self.histograms.items():
            prior = earlier.histograms.get(name)
            if prior is None:
                histograms[name] = HistogramDelta(hist.sum, hist.count, hist.buckets)
                continue
            if hist.count < prior.count:
                resets.append(name)
                histograms[name] = HistogramDelta(hist.sum, hist.count, hist.buckets)
                continue
            prior_buckets = dict(prior.buckets)
            buckets = tuple((le, n - prior_buckets.get(le, 0.0)) for le, n in hist.buckets)
            histograms[name] = HistogramDelta(hist.sum - prior.sum, hist.count - prior.count, buckets)
        return MetricsDelta(counters, histograms, dict(self.gauges), tuple(resets))

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "gauges": dict(self.gauges),
            "histograms": {name: h.to_dict() for name, h in self.histograms.items()},
            "cache_config_info": dict(self.cache_config_info),
            "request_success_by_reason": dict(self.request_success_by_reason),
            "aliases_used": dict(self.aliases_used),
        }


#: The API server's own HTTP timing of chat completions (prometheus-fastapi-instrumentator's
#: ``http_request_duration_seconds``, handler ``/v1/chat/completions``), kept under this name. It
#: starts when the request reaches the app and ends with the last streamed byte, so unlike the
#: engine's histograms it holds the parsing, templating and tokenizing of the request.
HTTP_CHAT_DURATION = "http_request_duration_seconds:/v1/chat/completions"
_HTTP_DURATION = "http_request_duration_seconds"


def _kept_name(family: str, sample: Any) -> str | None:
    """The name a sample is kept under: ``vllm:*`` as it is, the chat handler's HTTP duration renamed."""
    if family.startswith("vllm:"):
        return str(sample.name)
    if family == _HTTP_DURATION and sample.labels.get("handler") == "/v1/chat/completions":
        return HTTP_CHAT_DURATION + str(sample.name)[len(_HTTP_DURATION):]
    return None


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a ``/metrics`` body with ``prometheus_client``; keep the ``vllm:`` series (and the API
    server's HTTP duration of chat completions, ``HTTP_CHAT_DURATION``).

    Counters and histograms are summed over label sets; gauges too, except ``*_perc`` ones
    (utilisation), where the maximum over engines is kept. ``*_created`` series are dropped.
    """
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    hist_sum: dict[str, float] = {}
    hist_count: dict[str, float] = {}
    hist_buckets: dict[str, dict[float, float]] = {}
    cache_info: dict[str, str] = {}
    success_by_reason: dict[str, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(f"the /metrics body is not Prometheus text format: {exc}") from exc
    for family in families:
        if not family.name.startswith("vllm:") and family.name != _HTTP_DURATION:
            continue
        for sample in family.samples:
            kept, value = _kept_name(family.name, sample), float(sample.value)
            if kept is None or kept.endswith("_created") or math.isnan(value):
                continue
            name = kept
            if family.type == "histogram":
                if name.endswith("_bucket"):
                    base = name[: -len("_bucket")]
                    buckets = hist_buckets.setdefault(base, {})
                    le = _le(sample.labels.get("le", "+Inf"))
                    buckets[le] = buckets.get(le, 0.0) + value
                elif name.endswith("_sum"):
                    base = name[: -len("_sum")]
                    hist_sum[base] = hist_sum.get(base, 0.0) + value
                elif name.endswith("_count"):
                    base = name[: -len("_count")]
                    hist_count[base] = hist_count.get(base, 0.0) + value
            elif family.type == "counter":
                counters[name] = counters.get(name, 0.0) + value
                if name == "vllm:request_success_total":
                    reason = sample.labels.get("finished_reason", "")
                    success_by_reason[reason] = success_by_reason.get(reason, 0.0) + value
            elif name == "vllm:cache_config_info":
                cache_info = dict(sample.labels)
            elif family.type in ("gauge", "untyped", "unknown") and not name.endswith("_info"):
                if name.endswith("_perc"):
                    gauges[name] = max(gauges.get(name, value), value)
                else:
                    gauges[name] = gauges.get(name, 0.0) + value
    histograms = {
        base: HistogramSnapshot(
            sum=hist_sum.get(base, 0.0),
            count=hist_count.get(base, 0.0),
            buckets=tuple(sorted(hist_buckets.get(base, {}).items())),
        )
        for base in sorted(set(hist_sum) | set(hist_count) | set(hist_buckets))
    }
    aliases: dict[str, str] = {}
    for current, legacy in _METRIC_ALIASES.items():
        if _alias(counters, current, legacy) or _alias(gauges, current, legacy) or _alias(
            histograms, current, legacy
        ):
            aliases[current] = legacy
    return MetricsSnapshot(counters, gauges, histograms, cache_info, success_by_reason, aliases)


# --------------------------------------------------------------------------------------------
# /version, /v1/models, /metrics
# --------------------------------------------------------------------------------------------


@dataclass
class EndpointFacts:
    """What the running server reports over HTTP about its identity and counters."""

    version: str | None
    models: list[dict[str, Any]]
    metrics: MetricsSnapshot | None = None
    metrics_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "models": [dict(m) for m in self.models],
            "metrics": self.metrics.to_dict() if self.metrics is not None else None,
            "metrics_error": self.metrics_error,
        }


def _get_json(client: httpx.Client, path: str) -> Any:
    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        raise EngineEndpointError(f"GET {path} failed: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise EngineEndpointError(
            f"GET {path} answered HTTP {response.status_code}; a vLLM OpenAI server always serves it. "
            "Check that the endpoint URL points at the vLLM server itself, not a proxy path."
        )
    try:
        return response.json()
    except ValueError as exc:
        raise EngineEndpointError(f"GET {path} did not return JSON: {response.text[:200]!r}") from exc


def fetch_engine_endpoints(client: httpx.Client, *, metrics: bool = True) -> EndpointFacts:
    """Read ``/version``, ``/v1/models`` and (optionally present) ``/metrics`` from ``client``'s base URL.

    ``/version`` and ``/v1/models`` are required (EngineEndpointError otherwise). A missing or
    unparsable ``/metrics`` gives ``metrics=None`` and says why in ``metrics_error``.
    """
    version_body = _get_json(client, "/version")
    version = version_body.get("version") if isinstance(version_body, dict) else None
    models_body = _get_json(client, "/v1/models")
    if not isinstance(models_body, dict) or not isinstance(models_body.get("data"), list):
        raise EngineEndpointError("GET /v1/models did not return an OpenAI model list ({'data': [...]})")
    models: list[dict[str, Any]] = []
    for entry in models_body["data"]:
        if isinstance(entry, dict) and "id" in entry:
            models.append({
                "id": entry["id"],
                "root": entry.get("root"),
                "parent": entry.get("parent"),
                "max_model_len": entry.get("max_model_len"),
            })
    snapshot: MetricsSnapshot | None = None
    metrics_error: str | None = None
    if metrics:
        try:
            response = client.get("/metrics")
        except httpx.HTTPError as exc:
            metrics_error = f"GET /metrics failed: {type(exc).__name__}"
        else:
            if response.status_code == 200:
                try:
                    snapshot = parse_metrics(response.text)
                except MetricsParseError as exc:
                    metrics_error = str(exc)
            else:
                metrics_error = f"GET /metrics answered HTTP {response.status_code}"
    return EndpointFacts(version=str(version) if version is not None else None, models=models,
                         metrics=snapshot, metrics_error=metrics_error)
