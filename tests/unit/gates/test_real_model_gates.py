"""What a model nobody here trained needs from the gates: a per-gate declaration of not
applicable that is a claim checked by the run (never a pass), arithmetic judged by the answer's
final number, a long-context check sized to the served context, and the smoke's expected text
and finish rule read from the recipe. Answers are replayed through httpx.MockTransport."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support import ROOT

from pytest_vllmqual import (
    GateRecord,
    GateRecorder,
    QualClient,
    Recipe,
    ServerHandle,
    load_recipe,
    long_context_gate,
    reasoning_fingerprints_gate,
    repeated_check_gate,
    responses_gate,
    shipped_tool_fixtures,
    smoke_gate,
    tools_gate,
)
from pytest_vllmqual.client.results import ChatResult
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.gates.checks import SmokeResult, SmokeRule, judge_final_number
from pytest_vllmqual.gates.quality import long_context_target
from pytest_vllmqual.records import Attempt, GateOutcome, RunRecord
from pytest_vllmqual.report.decision import decide

SMOLLM2 = ROOT / "fixtures" / "recipes" / "smollm2-cpu.yaml"


@pytest.fixture
def smol() -> Recipe:
    return load_recipe(SMOLLM2)


@pytest.fixture
def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::x", gate="x", title="x"), tmp_path)


def with_gates(recipe: Recipe, **blocks: dict[str, Any]) -> Recipe:
    return dataclasses.replace(recipe, gates={**recipe.gates, **blocks})


def chat_body(content: str, finish_reason: str = "stop", tool_calls: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}


def answering(content: str, finish_reason: str = "stop") -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(200, json=chat_body(content, finish_reason))


def client(handler: Callable[[httpx.Request], httpx.Response]) -> QualClient:
    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                      timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    return qual


# -- arithmetic: the final number ------------------------------------------------------------


@pytest.mark.parametrize(("answer", "correct"), [
    ("7", True), ("7.", True), ("3 + 4 = 7", True), ("The answer is 7, not 8.", True), ("3+4=7", True),
    ("not 7", False), ("It isn't 7", False), ("7 or 8", False), ("8 or 7", False), ("7 (or 8)", False),
    ("12", False), ("Seven", False), ("3 + 4 = 7. Or maybe 8", False),
])
def test_an_arithmetic_answer_is_judged_by_its_final_affirmed_number(answer: str, correct: bool) -> None:
    assert judge_final_number(answer, 7).correct is correct, judge_final_number(answer, 7)


def test_number_only_is_a_finding_beside_the_judgement() -> None:
    assert judge_final_number("7", 7).number_only and not judge_final_number("3 + 4 = 7", 7).number_only
    assert judge_final_number("9 - 5 is 4.", 4).correct


def test_the_shipped_arithmetic_check_passes_an_answer_that_shows_its_working(smol: Recipe,
                                                                           recorder: GateRecorder) -> None:
    check = {"name": "addition", "prompt": "What is 3 + 4? Answer with the number only.", "answer": 7}
    verdict = repeated_check_gate(client(answering("3 + 4 = 7")), smol, recorder, "intelligence", check)
    assert verdict.passed, verdict.failure
    assert recorder.record.summary == "3/3" and recorder.record.measurements["number_only"] == 0
    assert recorder.record.measurements["finding"].startswith("3/3 answers were not the number alone")
    negated = repeated_check_gate(client(answering("not 7")), smol, recorder, "intelligence", check)
    assert negated.failure is not None and "0/3 answers matched final number 7" in negated.failure


# -- declared not applicable -----------------------------------------------------------------


def test_a_declared_gate_still_runs_and_its_failure_is_skipped_with_what_was_measured(
        smol: Recipe, recorder: GateRecorder) -> None:
    sent: list[httpx.Request] = []

    def prose(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=chat_body("The weather in Lima is sunny."))

    verdict = tools_gate(client(prose), smol, recorder, shipped_tool_fixtures())
    assert len(sent) == 3, "the declared gate ran its three cases"
    assert verdict.skip_reason is not None and not verdict.passed
    assert verdict.skip_reason.startswith("not applicable to recipe smollm2-cpu: its chat template has no tools")
    assert "(declared; this run measured: typed tools 0/3" in verdict.skip_reason
    assert json.loads(sent[0].content)["tool_choice"] == "auto", "nothing forces a call"
    assert recorder.record.measurements["measured_outcome"] == "failed"
    assert recorder.record.summary == "declared not applicable; measured 0/3"


def test_a_declared_gate_that_passes_passes_and_says_the_claim_no_longer_holds(
        smol: Recipe, recorder: GateRecorder) -> None:
    fixtures = shipped_tool_fixtures()[:1]

    def calls(request: httpx.Request) -> httpx.Response:
        call = {"id": "c1", "type": "function",
                "function": {"name": fixtures[0].name, "arguments": json.dumps(fixtures[0].expected)}}
        return httpx.Response(200, json=chat_body("", "tool_calls", [call]))

    verdict = tools_gate(client(calls), with_gates(smol, tools={**smol.gate("tools"), "count": 1}), recorder, fixtures)
    assert verdict.passed
    assert recorder.record.measurements["measured_outcome"] == "passed"
    assert recorder.record.summary.endswith("declared not applicable, but passed in this run: the declaration "
                                            "no longer holds")


def test_an_undeclared_gate_fails_as_before(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = tools_gate(client(answering("prose")), with_gates(tiny, tools={"count": 1}), recorder,
                         shipped_tool_fixtures())
    assert verdict.failure is not None and verdict.failure.startswith("typed tools 0/1")


def responses_answer(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "r", "object": "response", "status": "completed", "output": output,
            "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}}


def test_declaring_the_responses_function_call_still_requires_the_plain_answer(
        smol: Recipe, recorder: GateRecorder) -> None:
    text = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "cloud"}]}]
    verdict = responses_gate(client(lambda r: httpx.Response(200, json=responses_answer(text))), smol, recorder,
                             shipped_tool_fixtures())
    assert verdict.skip_reason is not None and "Responses function call: no tool call" in verdict.skip_reason
    assert recorder.record.summary == ("declared not applicable; measured the plain answer passed; the function "
                                       "call round trip did not")
    empty = responses_gate(client(lambda r: httpx.Response(200, json=responses_answer([]))), smol, recorder,
                           shipped_tool_fixtures())
    assert empty.failure is not None and empty.failure.startswith("Responses output has no output_text")


def test_declared_reasoning_fingerprints_run_and_record_the_counts(smol: Recipe, recorder: GateRecorder) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 9, "max_model_len": 8192, "tokens": []})
        return httpx.Response(200, json=chat_body("Hi"))

    verdict = reasoning_fingerprints_gate(client(handler), smol, recorder)
    assert verdict.skip_reason is not None and "the chat template ignores reasoning_effort" in verdict.skip_reason
    assert recorder.record.measurements["fingerprints"] == {"low": 9, "high": 9, "max": 9}


def test_a_declared_long_context_check_is_not_run(tiny: Recipe, recorder: GateRecorder) -> None:
    recipe = with_gates(tiny, quality={**tiny.gate("quality"), "not_applicable": {"long_context": "too slow here"}})

    def no_request(request: httpx.Request) -> httpx.Response:
        raise AssertionError("a declared long-context check sends no request")

    verdict = long_context_gate(client(no_request), recipe, recorder, progress=lambda _: None)
    assert verdict.skip_reason == ("not applicable to recipe tiny-cpu: too slow here (declared; not run: each long "
                                   "prompt costs a full prefill)")
    assert recorder.record.measurements["measured_outcome"] == "skipped"


@pytest.mark.parametrize("block", ["tools", "streaming_tool", "tool_continuation", "responses", "openai_sdk",
                                   "reasoning"])
def test_every_declarable_gate_takes_a_not_applicable_reason_in_the_schema(block: str, tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml").read_text())
    raw["gates"][block] = {**(raw["gates"].get(block) or {}), "not_applicable": "the template has no tools"}
    path = tmp_path / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_recipe(path).gate(block)["not_applicable"] == "the template has no tools"


def gate_row(name: str, outcome: str, **measurements: Any) -> GateRecord:
    return GateRecord(nodeid=f"t::{name}", gate=name, title=name, outcome=GateOutcome(outcome),
                      reason=None if outcome == "passed" else f"{name}: why", measurements=dict(measurements))


def test_the_decision_names_declared_gates_measured_failing_and_never_says_promotable() -> None:
    declared = {"declared_not_applicable": "no tools in its template"}
    record = RunRecord(run_id="r", arm="a", recipe_name="a", recipe_path="", recipe_sha256="0" * 64,
                       recipe_content={}, started_utc="2026-12-04T00:00:00Z", finished_utc=None, mode="managed",
                       status="complete",
                       gates=[gate_row("smoke", "passed"), gate_row("tools", "skipped", **declared,
                                                                    measured_outcome="failed"),
                              gate_row("streaming_tool", "passed", **declared, measured_outcome="passed")])
    decision = decide(record)
    assert decision.verdict.value == "healthy"
    assert any("declared not applicable by the recipe and measured failing in this run (a claim, not a pass): "
               "tools" in reason for reason in decision.reasons), decision.reasons
    assert ("gate streaming_tool is declared not applicable in the recipe but passed in this run: the "
            "declaration no longer holds") in decision.caveats


# -- long context sized to the recipe ---------------------------------------------------------


def test_the_long_context_check_sizes_itself_to_the_served_context() -> None:
    assert long_context_target({}, 8192) == (8160, "sized to the served max_model_len 8,192 minus 32 tokens for "
                                                   "the answer")
    assert long_context_target({}, 131072) == (32768, "the default")
    assert long_context_target({"long_context_tokens": 30000}, 32768) == (30000, "set by the recipe")
    target, why = long_context_target({"long_context_tokens": 32768}, 8192)
    assert target is None and why.startswith("gates.quality.long_context_tokens 32,768 does not fit the served "
                                              "max_model_len 8,192")


def test_a_long_context_size_that_does_not_fit_fails_with_the_reason_not_an_internal_error(
        tiny: Recipe, recorder: GateRecorder) -> None:
    def small_server(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/tokenize", "no long prompt is sent"
        return httpx.Response(200, json={"count": 40, "max_model_len": 8192, "tokens": []})

    verdict = long_context_gate(client(small_server), tiny, recorder, progress=lambda _: None)
    assert verdict.failure is not None and verdict.failure.startswith(
        "long context (smoke_after_filler) cannot run: gates.quality.long_context_tokens 30,000 does not fit")
    assert "CalibrationError" not in verdict.failure


# -- the smoke rule from the recipe ------------------------------------------------------------


def test_the_smoke_rule_comes_from_the_recipe(tiny: Recipe, recorder: GateRecorder) -> None:
    cut = with_gates(tiny, smoke={"prompt": "Say cloud.", "max_tokens": 8, "expect_substring": "cloud",
                                  "finish_reasons": ["stop", "length"]})
    assert smoke_gate(client(answering("A cloud is a visible mass", "length")), cut, recorder).passed
    assert recorder.record.summary == "pass (finished with 'length', which the recipe allows)"
    lacking = smoke_gate(client(answering("A mass of water", "length")), cut, recorder)
    assert lacking.failure == "smoke answer 'A mass of water' lacks 'cloud'"
    strict = smoke_gate(client(answering("Cloud and more", "length")), tiny, recorder)
    assert strict.failure == ("smoke finished with 'length', not 'stop': the model did not end its answer within "
                              "16 tokens")


def test_the_post_probe_smoke_uses_the_same_rule() -> None:
    def chat(content: str, finish: str) -> ChatResult:
        body = {"choices": [{"message": {"content": content}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
        return ChatResult(Attempt(kind="chat", label="post-probe", ok=True), 200, body, "")

    rule = SmokeRule(max_tokens=8, finish_reasons=("stop", "length"), expect="cloud")
    assert SmokeResult(chat("A cloud is", "length"), 8, rule).outcome == "passed"
    assert SmokeResult(chat("A mass of", "length"), 8, rule).outcome == "failed: answer 'A mass of' lacks 'cloud'"
    assert SmokeResult(chat("A cloud is", "length"), 8).outcome == "failed: finish_reason 'length', content 'A cloud is'"


def test_a_length_finish_needs_an_expected_text(tmp_path: Path) -> None:
    raw = yaml.safe_load(SMOLLM2.read_text())
    raw["gates"]["smoke"] = {"prompt": "Say cloud.", "finish_reasons": ["stop", "length"]}
    path = tmp_path / "smollm2-cpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecipeError, match=re.escape("gates.smoke.finish_reasons' allows 'length'")):
        load_recipe(path)


def test_smoke_after_filler_needs_the_smokes_expected_text(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml").read_text())
    del raw["gates"]["smoke"]["expect_substring"]
    path = tmp_path / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecipeError, match=re.escape("compares the answer after the filler with 'gates.smoke.expect_substring'")):
        load_recipe(path)
