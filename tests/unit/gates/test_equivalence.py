"""The equivalence probe as a gate, when the arm cannot be measured: a server that returns no log
probabilities, and a recipe whose context lengths do not fit the model, each skip the gate with a
reason that starts ``not measured:`` (the one rule every not-measured check follows); no request
is sent for the second."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.recipes import tiny

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, ServerHandle
from pytest_vllmqual.equivalence.memory import ProbeMemory, chunk_cost_bytes
from pytest_vllmqual.equivalence.runner import ProbeResult
from pytest_vllmqual.gates import equivalence as gate_module
from pytest_vllmqual.gates.equivalence import equivalence_gate


def client() -> QualClient:
    def no_request(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be sent: {request.url.path}")

    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external",
                                   direct_only=True), timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(no_request))
    return qual


def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::equivalence", gate="equivalence", title="Equivalence probe"), tmp_path)


def test_a_server_without_log_probabilities_is_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def answered(*args: Any) -> ProbeResult:
        return ProbeResult(0, reason="the server returned no top log probabilities (K = 0)")

    monkeypatch.setattr(gate_module, "run_probe", answered)
    gate = recorder(tmp_path)
    verdict = equivalence_gate(client(), tiny(), gate, [])
    assert verdict.failure is None
    assert verdict.skip_reason == ("not measured: the server returned no top log probabilities (K = 0); "
                                   "no comparison with this arm can be made"), verdict.skip_reason
    assert gate.record.summary == "not measured: the server returned no top log probabilities (K = 0)"


def test_context_lengths_that_do_not_fit_the_model_are_not_measured(tmp_path: Path) -> None:
    recipe = tiny()
    recipe = dataclasses.replace(recipe, gates={**recipe.gates, "equivalence": {"context_lengths": [1_000_000]}})
    verdict = equivalence_gate(client(), recipe, recorder(tmp_path), [])
    assert verdict.failure is None and verdict.skip_reason is not None
    assert verdict.skip_reason.startswith("not measured: no context length of gates.equivalence fits this model"), \
        verdict.skip_reason


def test_a_probe_is_sized_to_the_memory_outside_the_kv_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the context lengths whose chunk fits half the headroom are sent; the record says the limit and why."""
    sent: list[tuple[int, ...]] = []

    def answered(client: Any, settings: Any, prompts: Any, depth: Any = None) -> ProbeResult:
        sent.append(settings.context_lengths)
        return ProbeResult(0, reason="stopped here")

    monkeypatch.setattr(gate_module, "run_probe", answered)
    recipe = tiny()
    recipe = dataclasses.replace(recipe, gates={**recipe.gates, "equivalence": {"context_lengths": [256, 1024, 2048]}})
    gate = recorder(tmp_path)
    per_token = chunk_cost_bytes(1, 1216, 20)  # the tiny model's vocabulary, K asked 20
    equivalence_gate(client(), recipe, gate, [], ProbeMemory(2 * 1500 * per_token, "as given"))
    assert sent == [(256, 1024)]
    sizing = gate.record.measurements["chunk_sizing"]
    assert sizing["chunk_limit_tokens"] == 1500 and sizing["vocab"] == 1216
    assert "at most 1,500 tokens" in sizing["why"] and gate.record.measurements["dropped_lengths"] == [2048]


def test_a_probe_with_no_chunk_that_fits_is_not_measured_and_sends_nothing(tmp_path: Path) -> None:
    verdict = equivalence_gate(client(), tiny(), recorder(tmp_path), [], ProbeMemory(10_000_000, "10 MB as given"))
    assert verdict.failure is None and verdict.skip_reason is not None
    assert verdict.skip_reason.startswith("not measured: no probe chunk fits the memory the server has outside its "
                                          "KV budget"), verdict.skip_reason
