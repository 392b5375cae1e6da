"""Engine facts and identity: what the engine itself reports at startup, per rank, checked
against the recipe (the seeds' "15.27 GiB, 283,917 tokens, reported 2.17x")."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual.fact_sources import NOT_OBSERVABLE
from pytest_vllmqual.recipe import Recipe
from pytest_vllmqual.session import GateRecorder


@pytest.mark.engine
def test_identity(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Identity: /version, /v1/models, the TP ranks in the log and the image match the recipe."""
    identity = server_facts["identity"]
    gate.measure(identity_status=identity.get("status"),
                 **{f"observed_{c['field']}": c["observed"] for c in identity.get("checks", [])
                    if isinstance(c.get("observed"), (str, int, float)) or c.get("observed") is None})
    gate.summary(identity.get("status", "unverified")
                 + (" against a discovered recipe: nothing was pinned" if recipe.discovered else ""))
    mismatches = [c for c in identity.get("checks", []) if c.get("ok") is False]
    assert not mismatches, "provenance_mismatch: " + "; ".join(
        f"{c['field']}: recipe says {c['expected']!r}, server reports {c['observed']!r}" for c in mismatches)
    assert identity.get("status") == "verified", (
        "identity could not be verified: " + "; ".join(
            f"{c['field']}: {c.get('note') or 'no observation'}" for c in identity.get("checks", [])
            if c.get("ok") is None))


@pytest.mark.engine
def test_engine_ranks(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Per-rank facts: one entry per TP rank, each with its KV allocation; the minimum over ranks."""
    engine = server_facts["engine"]
    if (engine.get("sources") or {}).get("ranks") == NOT_OBSERVABLE:
        gate.measure(ranks_source=NOT_OBSERVABLE)
        gate.summary(f"per-rank memory: {NOT_OBSERVABLE} (no server log in direct-only mode)")
        pytest.skip(f"per-rank memory is {NOT_OBSERVABLE}: only the server log reports it")
    ranks = engine.get("ranks") or []
    tp = recipe.serve.tensor_parallel_size
    gate.measure(ranks=len(ranks), min_rank_kv_gib=engine.get("min_rank_kv_gib"),
                 init_engine_seconds=engine.get("init_engine_seconds"),
                 **{f"{r['label']}_kv_gib": r.get("available_kv_gib") for r in ranks},
                 **{f"{r['label']}_weights_gib": r.get("weights_gib") for r in ranks})
    gate.threshold(ranks=tp)
    assert len(ranks) == tp, f"the log shows {len(ranks)} rank(s) ({[r['label'] for r in ranks]}), recipe TP={tp}"
    missing = [r["rank"] for r in ranks if r.get("available_kv_gib") is None]
    assert not missing, f"no KV allocation logged for rank(s) {missing}"
    gate.summary(f"{len(ranks)} ranks, min-rank KV {engine.get('min_rank_kv_gib')} GiB")


@pytest.mark.engine
@pytest.mark.capacity
def test_kv_pool(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """KV pool: the engine-reported KV tokens reach the recipe minimum (393,216 for 393k-fp8kv)."""
    engine = server_facts["engine"]
    tokens = engine.get("kv_cache_tokens")
    minimum = recipe.gate("engine").get("min_kv_tokens") or recipe.gate("capacity").get("min_kv_tokens")
    gate.measure(kv_cache_tokens=tokens, max_concurrency=engine.get("max_concurrency"),
                 concurrency_at_tokens=engine.get("concurrency_at_tokens"),
                 min_rank_kv_gib=engine.get("min_rank_kv_gib"), device=engine.get("device"))
    source = (engine.get("sources") or {}).get("kv_cache_tokens", "log")
    gate.measure(kv_cache_tokens_source=source)
    gate.threshold(min_kv_tokens=minimum or ("nothing pinned (discovered recipe)" if recipe.discovered else None))
    assert tokens is not None, ("neither the engine log ('KV cache size: N tokens') nor /metrics "
                                "(vllm:cache_config_info kv_cache_size_tokens) reports the KV pool")
    summary = f"{tokens:,} tokens (from {source})"
    if engine.get("max_concurrency") is not None:
        summary += f", reported {engine['max_concurrency']:.2f}x at {engine.get('concurrency_at_tokens'):,} tokens"
    gate.summary(summary)
    if minimum:
        assert tokens >= minimum, f"engine-reported KV pool {tokens:,} tokens is below the recipe minimum {minimum:,}"


@pytest.mark.lifecycle
def test_cold_start(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Cold managed start: the server passed readiness (health, models, a 1-token completion) in time."""
    seconds = server_facts.get("cold_start_s")
    if seconds is None:
        gate.summary("direct-only")
        pytest.skip("direct-only: the server was not started by this run, so there is no cold start to measure")
    gate.measure(cold_start_s=round(seconds, 3))
    gate.threshold(deadline_s=recipe.startup.deadline_s)
    gate.summary(f"passed health in {seconds:.1f} seconds")
    assert seconds <= recipe.startup.deadline_s
