"""The shipped gates as functions: each writes its measurements and returns a verdict whose
failure is the message the test fails with. Answers are replayed through httpx.MockTransport
and facts are plain dicts, so each gate can be shown passing, failing and skipping without a
server. (The fixtures here are not named ``recipe`` or ``gate``: those are the plugin's, and a
test that uses ``gate`` is a gate of the run.)"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_vllmqual import (
    GateRecord,
    GateRecorder,
    GateVerdict,
    QualClient,
    Recipe,
    ServerHandle,
    engine_ranks_gate,
    json_gate,
    kv_pool_gate,
    load_recipe,
    repeated_check_gate,
    shipped_tool_fixtures,
    smoke_gate,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny() -> Recipe:
    return load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")


@pytest.fixture
def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::x", gate="x", title="x"), tmp_path)


def chat_answer(content: str, finish_reason: str = "stop", status: int = 200) -> Callable[..., httpx.Response]:
    body = {"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
    if status != 200:
        body = {"error": {"message": "engine overloaded", "type": "server_error", "code": status}}
    return lambda request: httpx.Response(status, json=body)


def client(handler: Callable[..., httpx.Response]) -> QualClient:
    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                      timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    return qual


def test_a_verdict_is_passed_failed_or_skipped_and_prints_short() -> None:
    assert GateVerdict().passed and repr(GateVerdict()) == "GateVerdict(passed)"
    failed = GateVerdict("smoke returned empty content")
    assert not failed.passed and repr(failed) == "GateVerdict(failed)"
    skipped = GateVerdict(skip_reason="not applicable")
    assert not skipped.passed and repr(skipped) == "GateVerdict(skipped)"


def test_smoke_passes_and_measures(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = smoke_gate(client(chat_answer("cloud")), tiny, recorder)
    assert verdict.passed, verdict.failure
    assert recorder.record.summary == "pass"
    assert recorder.record.measurements["finish_reason"] == "stop" and recorder.record.measurements["prompt_tokens"] == 9


def test_smoke_that_runs_out_of_tokens_fails_with_the_reason(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = smoke_gate(client(chat_answer("clo", finish_reason="length")), tiny, recorder)
    assert verdict.failure == ("smoke finished with 'length', not 'stop': the model did not end its answer "
                               "within 16 tokens")
    assert recorder.record.summary is None, "a failed gate does not say pass"


def test_smoke_http_error_stops_before_measuring(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = smoke_gate(client(chat_answer("", status=500)), tiny, recorder)
    assert verdict.failure is not None and verdict.failure.startswith("smoke returned HTTP 500")
    assert recorder.record.measurements == {}


def test_json_gate_names_what_broke(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = json_gate(client(chat_answer('{"city": "Lima"}')), tiny, recorder)
    assert verdict.failure is not None and verdict.failure.startswith("JSON gate: content violates the schema")
    assert "'country' is a required property" in verdict.failure
    good = json_gate(client(chat_answer(json.dumps({"city": "Lima", "country": "Peru"}))), tiny, recorder)
    assert good.passed, good.failure


def test_a_declared_quality_check_runs_and_its_failure_is_skipped_with_what_was_measured(
        tiny: Recipe, recorder: GateRecorder) -> None:
    sent: list[httpx.Request] = []
    answer = chat_answer("12")

    def counted(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answer(request)

    verdict = repeated_check_gate(client(counted), tiny, recorder, "intelligence",
                                  {"name": "sum", "prompt": "2+2?", "answer": 4})
    assert verdict.skip_reason is not None and verdict.skip_reason.startswith(
        "not applicable to recipe tiny-cpu: the 2-layer fixture model cannot do arithmetic")
    assert "(declared; this run measured: sum: 0/3 answers matched final number 4" in verdict.skip_reason
    assert not verdict.passed and recorder.record.summary == "declared not applicable; measured 0/3"
    assert recorder.record.measurements["measured_outcome"] == "failed"
    assert len(sent) == 3, "a cheap declared check still runs"


def test_a_declared_quality_check_that_passes_passes_and_says_the_declaration_no_longer_holds(
        tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = repeated_check_gate(client(chat_answer("4")), tiny, recorder, "intelligence",
                                  {"name": "sum", "prompt": "2+2?", "answer": 4})
    assert verdict.passed
    assert recorder.record.summary == ("3/3; declared not applicable, but passed in this run: "
                                       "the declaration no longer holds")
    assert recorder.record.measurements["measured_outcome"] == "passed"


def test_a_repeated_check_reports_k_of_n(tiny: Recipe, recorder: GateRecorder) -> None:
    recipe = dataclasses.replace(tiny, gates={**tiny.gates, "quality": {"repeat": 2}})
    verdict = repeated_check_gate(client(chat_answer("five")), recipe, recorder, "intelligence",
                                  {"name": "sum", "prompt": "2+2?", "expect": "4"})
    assert verdict.failure == "sum: 0/2 answers matched /4/; answers: ['five', 'five']"
    assert recorder.record.summary == "0/2" and recorder.record.thresholds == {"required": "2/2"}


def facts(**engine: Any) -> dict[str, Any]:
    return {"engine": engine, "identity": {}}


def test_kv_pool_below_the_recipe_minimum_fails(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = kv_pool_gate(facts(kv_cache_tokens=1000, sources={"kv_cache_tokens": "log"}), tiny, recorder)
    assert verdict.failure == "engine-reported KV pool 1,000 tokens is below the recipe minimum 32,768"
    assert recorder.record.summary == "1,000 tokens (from log)"
    assert kv_pool_gate(facts(kv_cache_tokens=40000), tiny, recorder).passed


def test_per_rank_facts_are_skipped_without_a_server_log(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = engine_ranks_gate(facts(sources={"ranks": "not observable from the endpoint"}), tiny, recorder)
    assert verdict.skip_reason == "per-rank memory is not observable from the endpoint: only the server log reports it"
    assert recorder.record.measurements == {"ranks_source": "not observable from the endpoint"}


def test_the_shipped_tools_are_read_once() -> None:
    first, second = shipped_tool_fixtures(), shipped_tool_fixtures()
    assert len(first) == 20 and first == second and first[0] is second[0]
