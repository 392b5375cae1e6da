"""Engine facts from wherever they can be observed, each naming its source.

A managed server's log gives the richest facts (per-rank memory, KV size line, init time). A
server that is only reachable over HTTP has no log, but ``/metrics`` still carries the KV pool
(``vllm:cache_config_info``: ``kv_cache_size_tokens``, ``kv_cache_max_concurrency``,
``kv_cache_memory_bytes``, ``num_gpu_blocks``, ``block_size``) and ``/version`` the runtime.
This module fills the facts the log did not give from those, and records for every fact where
it came from: ``log``, ``metrics`` or ``endpoint`` — or that it is not observable from the
endpoint (per-rank memory), which is a limit of direct-only mode, not a failure. The gates read
the result as ``log_facts.EngineFacts.from_dict``.
"""

from __future__ import annotations

from typing import Any

from .log_facts import NOT_OBSERVABLE, NOT_REPORTED, SOURCE_ENDPOINT, SOURCE_LOG, SOURCE_METRICS

# Facts only a server log carries (per-rank memory and timings).
LOG_ONLY = ("ranks", "min_rank_kv_gib", "tp_size_seen", "init_engine_seconds", "compilation_seconds",
            "device", "kv_pool")


def _number(text: str | None) -> float | None:
    if text in (None, "", "None"):
        return None
    try:
        return float(str(text))
    except ValueError:
        return None


def facts_from_metrics(cache_info: dict[str, str], *, max_model_len: int | None) -> dict[str, Any]:
    """Engine facts that ``vllm:cache_config_info`` gives (absent labels are left out)."""
    out: dict[str, Any] = {}
    tokens = _number(cache_info.get("kv_cache_size_tokens"))
    if tokens is not None:
        out["kv_cache_tokens"] = int(tokens)
    concurrency = _number(cache_info.get("kv_cache_max_concurrency"))
    if concurrency is not None:
        out["max_concurrency"] = round(concurrency, 2)
        if max_model_len is not None:
            out["concurrency_at_tokens"] = max_model_len
    memory = _number(cache_info.get("kv_cache_memory_bytes"))
    if memory is not None:
        out["kv_cache_memory_gib"] = round(memory / 2**30, 2)
    return out


def with_sources(engine: dict[str, Any], endpoints: dict[str, Any], *, has_log: bool) -> dict[str, Any]:
    """``engine`` (parsed from the log, possibly empty) completed from the endpoint facts, with
    ``sources``: fact name -> log / metrics / endpoint / not observable from the endpoint."""
    out = dict(engine)
    sources: dict[str, str] = {}
    metrics = endpoints.get("metrics") or {}
    cache_info = dict(metrics.get("cache_config_info") or {})
    models = endpoints.get("models") or []
    max_len = models[0].get("max_model_len") if len(models) == 1 else None
    from_metrics = facts_from_metrics(cache_info, max_model_len=max_len if isinstance(max_len, int) else None)
    for name in ("kv_cache_tokens", "max_concurrency", "concurrency_at_tokens"):
        if out.get(name) is not None:
            sources[name] = SOURCE_LOG
        elif name in from_metrics:
            out[name] = from_metrics[name]
            sources[name] = SOURCE_METRICS
        else:
            sources[name] = NOT_REPORTED if has_log else NOT_OBSERVABLE
    if "kv_cache_memory_gib" in from_metrics:
        sources["kv_cache_memory_gib"] = SOURCE_METRICS
        out["kv_cache_memory_gib"] = from_metrics["kv_cache_memory_gib"]
    if cache_info:
        sources["cache_config"] = SOURCE_METRICS
    if out.get("vllm_version") is not None:
        sources["vllm_version"] = SOURCE_LOG
    elif endpoints.get("version") is not None:
        out["vllm_version"] = endpoints["version"]
        sources["vllm_version"] = SOURCE_ENDPOINT
    for name in LOG_ONLY:
        value = out.get(name)
        if has_log:
            sources[name] = SOURCE_LOG if value not in (None, []) else NOT_REPORTED
        else:
            sources[name] = NOT_OBSERVABLE
    if models:
        sources["served_model"] = sources["max_model_len"] = SOURCE_ENDPOINT
    out["sources"] = sources
    return out

__all__ = ["facts_from_metrics", "with_sources"]
