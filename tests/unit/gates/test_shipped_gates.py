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
from support import ROOT

from pytest_vllmqual import (
    GateRecord,
    GateRecorder,
    GateVerdict,
    QualClient,
    Recipe,
    ServerHandle,
    cold_start_gate,
    engine_ranks_gate,
    json_gate,
    kv_pool_gate,
    load_recipe,
    reasoning_fingerprints_gate,
    repeated_check_gate,
    shipped_tool_fixtures,
    smoke_gate,
)
from pytest_vllmqual.gates.registry import proves


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
    assert "missing required key 'country'" in verdict.failure
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


def passed_record(name: str, recorder: GateRecorder) -> dict[str, Any]:
    """The public shape ``proves`` reads: the gate's measurements and thresholds, as passed."""
    record = recorder.record
    return {"gate": name, "outcome": "passed", "measurements": record.measurements, "thresholds": record.thresholds}


def test_kv_pool_proves_a_minimum_only_where_the_recipe_sets_one(tiny: Recipe, recorder: GateRecorder) -> None:
    assert kv_pool_gate(facts(kv_cache_tokens=40000), tiny, recorder).passed
    assert proves(passed_record("kv_pool", recorder)) == ("the engine reported a KV pool of 40,000 tokens, at or "
                                                          "above the recipe minimum of 32,768")
    control = load_recipe(ROOT / "fixtures" / "recipes" / "131k-control.yaml")
    assert kv_pool_gate(facts(kv_cache_tokens=283917), control, recorder).passed
    said = proves(passed_record("kv_pool", recorder))
    assert said == "the engine reported a KV pool of 283,917 tokens (measured only: the recipe sets no minimum)"


def fingerprint_server(counts: dict[str, int]) -> Callable[[httpx.Request], httpx.Response]:
    """Answers a 1-token chat and /tokenize with each effort's prompt length."""
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": counts[body["chat_template_kwargs"]["reasoning_effort"]]})
        n = counts[body["reasoning_effort"]]
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}})
    return answer


def test_reasoning_fingerprints_proves_a_pin_only_where_one_was_pinned(tiny: Recipe, recorder: GateRecorder) -> None:
    pinned = {"low": 42, "high": 82, "max": 175}
    assert reasoning_fingerprints_gate(client(fingerprint_server(pinned)), tiny, recorder).passed
    assert proves(passed_record("reasoning_fingerprints", recorder)) == (
        "each reasoning effort's prompt-token count equals its pinned fingerprint (low 42, high 82, max 175), "
        "by usage and /tokenize")
    unpinned = dataclasses.replace(tiny, gates={**tiny.gates, "reasoning": {}})
    assert reasoning_fingerprints_gate(client(fingerprint_server(pinned)), unpinned, recorder).passed
    assert proves(passed_record("reasoning_fingerprints", recorder)).startswith(
        "nothing was pinned: the reasoning efforts' prompt-token counts (low 42, high 82, max 175) differ")
    discovered = dataclasses.replace(unpinned, discovered=True)
    same = {"low": 7, "high": 7, "max": 7}
    assert reasoning_fingerprints_gate(client(fingerprint_server(same)), discovered, recorder).passed
    said = proves(passed_record("reasoning_fingerprints", recorder))
    assert said == ("nothing was pinned: each reasoning effort's prompt-token count (low 7, high 7, max 7) was "
                    "measured, usage and /tokenize agreeing")
    assert recorder.record.thresholds["fingerprints"] == "not pinned (discovered recipe): measured only"


def test_engine_ranks_proves_the_kv_of_the_ranks_that_logged_it(tiny: Recipe, recorder: GateRecorder) -> None:
    gpu = {"ranks": 2, "min_rank_kv_gib": 125.04, "ranks_reporting_kv": ["Worker_TP0"],
           "ranks_not_reporting_kv": ["Worker_TP1"]}
    assert proves({"gate": "engine_ranks", "outcome": "passed", "measurements": gpu}) == (
        "the log shows 2 rank(s); Worker_TP0 logged its KV allocation (minimum 125.04 GiB), Worker_TP1 logged "
        "none (GPU vLLM logs it on rank 0 only)")
    cpu = {**gpu, "ranks_reporting_kv": ["Worker_TP0", "Worker_TP1"], "ranks_not_reporting_kv": []}
    assert proves({"gate": "engine_ranks", "outcome": "passed", "measurements": cpu}) == (
        "the log shows 2 rank(s), each with its KV allocation (minimum 125.04 GiB)")


def test_tool_continuation_proves_what_it_checked() -> None:
    gate = {"gate": "tool_continuation", "outcome": "passed",
            "measurements": {"finish_reason": "stop", "answer_chars": 31, "repeated_calls": 0}}
    said = proves(gate)
    assert said is not None and "answered from a tool result" not in said
    assert said == ("after a tool call and its result, the model's next turn ended with finish_reason stop and 31 "
                    "characters of text, without repeating the call (whether the answer used the result is not "
                    "checked)")


def test_cold_start_is_judged_against_the_recipes_ceiling(tiny: Recipe, recorder: GateRecorder) -> None:
    assert tiny.startup.cold_start_max_s == 240
    assert cold_start_gate({"cold_start_s": 51.94}, tiny, recorder).passed
    assert recorder.record.thresholds == {"deadline_s": 300, "cold_start_max_s": 240}
    assert proves(passed_record("cold_start", recorder)) == ("a cold managed start passed health, the model list and "
                                                             "a real completion in 51.9 s, within the recipe's "
                                                             "ceiling of 240 s")
    slow = cold_start_gate({"cold_start_s": 250.0}, tiny, recorder)
    assert slow.failure == ("cold start took 250.0 s, above the recipe's ceiling of 240 s "
                            "(startup.cold_start_max_s)")


def test_cold_start_without_a_ceiling_is_recorded_not_passed(tiny: Recipe, recorder: GateRecorder) -> None:
    open_ended = dataclasses.replace(tiny, startup=dataclasses.replace(tiny.startup, cold_start_max_s=None))
    verdict = cold_start_gate({"cold_start_s": 51.94}, open_ended, recorder)
    assert not verdict.passed and verdict.failure is None
    assert verdict.skip_reason == ("not judged: recipe tiny-cpu sets no startup.cold_start_max_s, so the cold start "
                                   "of 51.9 s is recorded but held to no ceiling")
    assert recorder.record.measurements["cold_start_s"] == 51.94
    assert recorder.record.summary == "ready in 51.9 s; no ceiling set"
    direct = cold_start_gate({"cold_start_s": None}, tiny, recorder)
    assert direct.skip_reason is not None and direct.skip_reason.startswith("direct-only")


def test_per_rank_facts_are_skipped_without_a_server_log(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = engine_ranks_gate(facts(sources={"ranks": "not observable from the endpoint"}), tiny, recorder)
    assert verdict.skip_reason == "per-rank memory is not observable from the endpoint: only the server log reports it"
    assert recorder.record.measurements == {"ranks_source": "not observable from the endpoint"}


def test_the_shipped_tools_are_read_once() -> None:
    first, second = shipped_tool_fixtures(), shipped_tool_fixtures()
    assert len(first) == 20 and first == second and first[0] is second[0]


def test_a_failure_reason_quotes_an_answer_bounded(tiny: Recipe, recorder: GateRecorder) -> None:
    """The README's policy: at most ANSWER_QUOTE_CHARS characters of each answer, at most ANSWER_QUOTES answers."""
    from pytest_vllmqual.privacy.public_text import ANSWER_QUOTE_CHARS, ANSWER_QUOTES

    long_answer = "The answer, as I see it, is certainly five. " * 6
    recipe = dataclasses.replace(tiny, gates={**tiny.gates, "quality": {"repeat": 5}})
    verdict = repeated_check_gate(client(chat_answer(long_answer)), recipe, recorder, "intelligence",
                                  {"name": "sum", "prompt": "2+2?", "expect": "4"})
    quote = repr(long_answer[:ANSWER_QUOTE_CHARS]) + f"... ({len(long_answer):,} characters)"
    assert verdict.failure == f"sum: 0/5 answers matched /4/; answers: [{quote}, {quote}, {quote}, and 2 more]"
    assert long_answer[:ANSWER_QUOTE_CHARS + 1] not in str(verdict.failure) and ANSWER_QUOTES == 3
    not_json = json_gate(client(chat_answer("x" * 500)), tiny, recorder)
    assert not_json.failure is not None and not_json.failure.endswith(f"{'x' * ANSWER_QUOTE_CHARS!r}... (500 characters)")
    readme = (ROOT / "README.md").read_text()
    assert f"at most {ANSWER_QUOTE_CHARS} characters" in readme and f"at most {ANSWER_QUOTES} answers" in readme


def test_a_schema_violation_quotes_a_long_value_bounded(tiny: Recipe, recorder: GateRecorder) -> None:
    long_country = "Peru " * 40
    verdict = json_gate(client(chat_answer(json.dumps({"city": 7, "country": long_country}))), tiny, recorder)
    assert verdict.failure is not None and "key 'city' must be of type string, got int 7" in verdict.failure
    assert long_country[:41] not in verdict.failure
    assert f"key 'country' is {long_country[:40]!r}... (200 characters), which breaks its maxLength rule" in verdict.failure
