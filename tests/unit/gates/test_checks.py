"""Each gate can turn red, with a message that says what broke: a wrong schema, a
missing [DONE], a missing usage chunk, a template that ignores the effort, a wrong tool name.
Streams are replayed through httpx.MockTransport: the real server never breaks these rules
on demand, which is exactly why the checks need proof that they fire."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest
from support.recipes import RECIPES

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.checks import (
    ArgumentViolation,
    SmokeRule,
    ToolCase,
    check_fingerprints,
    check_json_content,
    check_stream_tool,
    check_tool_call,
    missing_tool_flags,
    schema_violations,
    tool_call_problems,
)
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.loader import load_recipe

WEATHER = ToolCase(
    name="get_weather", description="", prompt="What is the weather in Lima in celsius?",
    parameters={"type": "object", "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": False},
    expected={"city": "Lima", "unit": "celsius"},
)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}


def sse(chunks: list[dict[str, Any]], *, done: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


def tool_stream(name: str = "get_weather", args: str = '{"city": "Lima", "unit": "celsius"}',
                usage: bool = True) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[:10]}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[10:]}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    if usage:
        chunks.append({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62}})
    return chunks


def replay(body: bytes) -> QualClient:
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, stream=httpx.ByteStream(body), headers={"content-type": "text/event-stream"}))
    client = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                        timeout_s=5)
    client._http = httpx.Client(base_url="http://test", transport=transport)
    return client


def test_a_good_stream_passes() -> None:
    result = replay(sse(tool_stream())).stream_chat({"messages": []}, label="ok")
    assert check_stream_tool(result, WEATHER, value_checks=True) == []
    assert result.ttft_s is not None and result.usage == {"prompt_tokens": 50, "completion_tokens": 12,
                                                          "total_tokens": 62}


def test_missing_done_turns_the_streaming_gate_red() -> None:
    result = replay(sse(tool_stream(), done=False)).stream_chat({"messages": []}, label="no-done")
    assert "stream ended without the [DONE] terminator" in check_stream_tool(result, WEATHER, value_checks=False)
    assert not result.attempt.ok


def test_missing_usage_chunk_turns_the_streaming_gate_red() -> None:
    result = replay(sse(tool_stream(usage=False))).stream_chat({"messages": []}, label="no-usage")
    problems = check_stream_tool(result, WEATHER, value_checks=False)
    assert any("no usage chunk" in p for p in problems)


def test_first_tool_delta_without_id_is_named() -> None:
    chunks = tool_stream()
    del chunks[1]["choices"][0]["delta"]["tool_calls"][0]["id"]
    result = replay(sse(chunks)).stream_chat({"messages": []}, label="no-id")
    assert "first delta of tool call 0 has no id" in check_stream_tool(result, WEATHER, value_checks=False)


def test_wrong_tool_name_turns_the_tools_gate_red() -> None:
    problems = check_tool_call([{"function": {"name": "get_time", "arguments": "{}"}}], WEATHER, value_checks=False)
    assert problems == ["tool call names 'get_time', expected 'get_weather'"]
    streamed = replay(sse(tool_stream(name="get_time"))).stream_chat({"messages": []}, label="wrong-name")
    assert "tool call names 'get_time', expected 'get_weather'" in check_stream_tool(streamed, WEATHER,
                                                                                    value_checks=False)


def test_arguments_outside_the_schema_are_named_by_path_and_kind() -> None:
    """The path in the arguments and the kind of value, never the model's own text."""
    problems = check_tool_call([{"function": {"name": "get_weather",
                                              "arguments": '{"city": "Lima", "unit": "kelvin", "x": 1}'}}],
                               WEATHER, value_checks=False)
    assert problems == [
        "arguments of get_weather violate the schema: key 'unit' is a string, which is not one of celsius, fahrenheit",
        "arguments of get_weather violate the schema: unknown key 'x'"]
    assert "kelvin" not in " ".join(problems)


NESTED = ToolCase(
    name="create_event", description="", prompt="Book it.",
    parameters={"type": "object", "required": ["title", "start"], "properties": {
        "title": {"type": "string", "maxLength": 5},
        "start": {"type": "object", "required": ["date", "time"],
                  "properties": {"date": {"type": "string"}, "time": {"type": "string"}}},
        "guests": {"type": "array", "items": {"type": "integer"}}}},
    expected={},
)


def test_a_nested_missing_property_says_its_full_path_and_missing() -> None:
    calls = [{"name": "create_event", "arguments": '{"title": "Standup", "start": {"date": "2026-01-01"}, '
                                                   '"guests": [1, "two"]}'}]
    problems = tool_call_problems(calls, NESTED, value_checks=False)
    assert [(p.path, p.kind) for p in problems] == [
        ("guests.1", "must be of type integer, got a string"),
        ("start.time", "missing"),
        ("title", "is a string, which breaks its maxLength rule 5")]
    assert problems[1].text == "arguments of create_event violate the schema: missing required key 'start.time'"
    assert schema_violations({}, NESTED.parameters) == [ArgumentViolation("start", "missing"),
                                                        ArgumentViolation("title", "missing")]


def test_a_call_that_breaks_no_schema_rule_still_says_what_kind_of_problem() -> None:
    assert [(p.path, p.kind) for p in tool_call_problems([], NESTED, value_checks=False)] == [(None, "no tool call")]
    wrong = tool_call_problems([{"name": "get_weather", "arguments": "{}"}], NESTED, value_checks=False)
    assert [(p.path, p.kind) for p in wrong] == [("name", "another tool")]
    broken = tool_call_problems([{"name": "create_event", "arguments": "{"}], NESTED, value_checks=False)
    assert [(p.path, p.kind) for p in broken] == [("arguments", "not JSON")]


def test_value_checks_compare_expected_values() -> None:
    calls = [{"function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]
    assert check_tool_call(calls, WEATHER, value_checks=False) == []
    assert "expected {'city': 'Lima', 'unit': 'celsius'}" in check_tool_call(calls, WEATHER, value_checks=True)[0]


def test_wrong_schema_turns_the_json_gate_red() -> None:
    assert check_json_content('{"city": "Lima"}', SCHEMA, "stop") == []
    problems = check_json_content('{"town": "Lima"}', SCHEMA, "stop")
    assert "content violates the schema: missing required key 'city'" in problems
    assert check_json_content('{"city": "Li', SCHEMA, "length")[0] == "finish_reason is 'length', expected 'stop'"


def test_a_template_that_ignores_the_effort_turns_the_reasoning_gate_red() -> None:
    problems = check_fingerprints({"low": 9, "high": 9, "max": 9}, {})
    assert problems == ["the prompt has 9 tokens at every effort (low, high, max): the chat template ignores "
                        "reasoning_effort"]
    assert check_fingerprints({"low": 42, "high": 82, "max": 175}, {"low": 42, "high": 82, "max": 175}) == []
    assert check_fingerprints({"low": 6, "high": 85, "max": 99}, {"low": 6, "high": 85, "max": 98}) == [
        "effort max: 99 prompt tokens, expected fingerprint 98"]


@pytest.mark.parametrize("body", [b"data: {not json}\n\n", b""])
def test_garbage_streams_are_reported(body: bytes) -> None:
    result = replay(body).stream_chat({"messages": []}, label="garbage")
    assert result.violations and not result.attempt.ok


def test_explicit_retries_record_every_attempt() -> None:
    """A transient HTTP 500 is a failed attempt: a retry happens only when the recipe asks, and every attempt is kept."""
    calls: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(500, json={"error": {"message": "transient"}})
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})

    recorded: list[Any] = []

    class Sink:
        def record_attempt(self, attempt: Any, request: bytes, response: bytes) -> None:
            recorded.append(attempt)

    for retries, expected_ok, expected_attempts in ((0, False, 1), (1, True, 2)):
        calls.clear()
        recorded.clear()
        client = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                            timeout_s=5, sink=Sink(), retries=retries)
        client._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(answer))
        result = client.chat({"messages": []}, label="flaky")
        assert result.ok is expected_ok and len(recorded) == expected_attempts == len(calls)
        assert recorded[0].status_code == 500 and not recorded[0].ok
        assert [a.label for a in recorded] == ["flaky", "flaky-retry1"][:expected_attempts]


def test_the_default_smoke_prompt_is_the_one_a_small_instruct_model_answers_in_its_tokens() -> None:
    """"Say cloud." in 32 tokens got an essay from SmolLM2, so every post-probe smoke of a recipe without
    a smoke prompt failed; the smollm2-cpu recipe found the prompt such a model answers, and a recipe
    that sets no prompt gets that one."""
    found = load_recipe(RECIPES / "smollm2-cpu.yaml").gate("smoke")["prompt"]
    tiny = load_recipe(RECIPES / "tiny-cpu.yaml")
    bare = dataclasses.replace(tiny, gates={k: v for k, v in tiny.gates.items() if k != "smoke"})
    assert SmokeRule.of(bare).prompt == found
    assert SmokeRule().prompt == found


@pytest.mark.parametrize("name", ["tiny-cpu", "tiny-cpu-4096", "tiny-cpu-kvfail", "tiny-docker", "tiny-gpu",
                                  "tiny-gpu-kvfail", "tiny-gpu-131k-4096", "tiny-gpu-131k-8192",
                                  "tiny-gpu-393k-fp8kv", "tiny-gpu-393k-offload"])
def test_the_tiny_recipes_keep_the_prompt_their_model_was_trained_on(name: str) -> None:
    """The fixture model learned "Say cloud." -> "Cloud."; each tiny recipe says so itself, so a new
    default changes nothing for them."""
    assert load_recipe(RECIPES / f"{name}.yaml").gate("smoke").get("prompt") == "Say cloud."


def test_the_tool_flags_a_recipe_lacks_are_read_from_its_keys_and_its_extra_args() -> None:
    tiny = load_recipe(RECIPES / "tiny-cpu.yaml")
    assert missing_tool_flags(tiny) == []
    bare = dataclasses.replace(tiny, serve=dataclasses.replace(tiny.serve, enable_auto_tool_choice=False,
                                                               tool_call_parser=None))
    assert missing_tool_flags(bare) == [("--enable-auto-tool-choice", "serve.enable_auto_tool_choice: true"),
                                        ("--tool-call-parser", "serve.tool_call_parser: NAME")]
    extra = dataclasses.replace(bare, serve=dataclasses.replace(
        bare.serve, extra_args=("--enable-auto-tool-choice", "--tool-call-parser=hermes")))
    assert missing_tool_flags(extra) == []
