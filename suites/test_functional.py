"""The functional preflight after smoke: JSON, N/N typed tools, streaming tool, tool-result
continuation and the Responses API (the seeds' "6/6" with test_smoke.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.checks import (
    ToolFixture,
    check_json_content,
    check_stream_tool,
    check_tool_call,
    load_tool_fixtures,
    recipe_tool_fixtures_path,
)
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.layout import fixtures_dir
from pytest_vllmqual.privacy.public_text import public_failure
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.functional]

JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "country": {"type": "string", "minLength": 1, "maxLength": 40},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}
JSON_PROMPT = "Lima is the capital of Peru. Reply in JSON with the city and the country."


DEFAULT_TOOL_FIXTURES = fixtures_dir() / "tools" / "typed_tools.yaml"
if DEFAULT_TOOL_FIXTURES.is_file():
    # Read at collection, while no server runs: read between requests, it waited ~1 s for the CPU
    # on 2-core machines (the server's post-step busy-poll; docs/PERFORMANCE.md).
    load_tool_fixtures(DEFAULT_TOOL_FIXTURES)


@pytest.fixture
def tool_fixtures(recipe: Recipe) -> list[ToolFixture]:
    return load_tool_fixtures(recipe_tool_fixtures_path(recipe.gate("tools").get("fixtures"), recipe.project_root))


def _tool_choice(recipe: Recipe, fixture: ToolFixture) -> Any:
    mode = recipe.gate("tools").get("tool_choice", "auto")
    if mode == "named":
        return {"type": "function", "function": {"name": fixture.name}}
    return mode


@pytest.mark.gate("json")
def test_json(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """JSON: response_format json_schema; content parses, validates, finish_reason stop."""
    result = qual_client.chat(
        {"messages": [{"role": "user", "content": JSON_PROMPT}],
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "city_country", "schema": JSON_SCHEMA, "strict": True}},
         "max_tokens": recipe.gate("json").get("max_tokens", 128), "temperature": 0},
        label="json_schema",
    )
    assert result.status_code == 200, public_failure(result.attempt)
    gate.measure(content_chars=len(result.content), finish_reason=result.finish_reason,
                 completion_tokens=result.completion_tokens)
    problems = check_json_content(result.content, JSON_SCHEMA, result.finish_reason)
    assert not problems, "JSON gate: " + "; ".join(problems)
    gate.summary("pass")


@pytest.mark.gate("tools")
def test_tools(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
               tool_fixtures: list[ToolFixture]) -> None:
    """Typed tools N/N: every tool called by name with schema-valid arguments."""
    settings = recipe.gate("tools")
    count = settings.get("count", 20)
    value_checks = bool(settings.get("value_checks", False))
    chosen = tool_fixtures[:count]
    all_tools = [f.openai_tool() for f in tool_fixtures]
    failures: dict[str, list[str]] = {}
    for fixture in chosen:
        result = qual_client.chat(
            {"messages": [{"role": "user", "content": fixture.prompt}], "tools": all_tools,
             "tool_choice": _tool_choice(recipe, fixture),
             "max_tokens": settings.get("max_tokens", 256), "temperature": 0},
            label=f"tool-{fixture.name}",
        )
        if result.status_code != 200:
            failures[fixture.name] = [public_failure(result.attempt)]
            continue
        problems = check_tool_call(result.tool_calls, fixture, value_checks=value_checks)
        if problems:
            failures[fixture.name] = problems
    passed = len(chosen) - len(failures)
    mode = settings.get("tool_choice", "auto")
    gate.summary(f"{passed}/{len(chosen)}")
    gate.measure(passed=passed, total=len(chosen), tool_choice=mode, value_checks=value_checks)
    gate.threshold(required=f"{len(chosen)}/{len(chosen)}")
    assert not failures, f"typed tools {passed}/{len(chosen)} (tool_choice={mode}): " + "; ".join(
        f"{name}: {', '.join(p)}" for name, p in failures.items())


@pytest.mark.gate("streaming_tool")
def test_streaming_tool(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                        tool_fixtures: list[ToolFixture]) -> None:
    """Streaming tool: deltas reassemble into one valid call; [DONE] and a usage chunk arrive."""
    settings = recipe.gate("streaming_tool")
    name = settings.get("tool", tool_fixtures[0].name)
    fixture = next(f for f in tool_fixtures if f.name == name)
    result = qual_client.stream_chat(
        {"messages": [{"role": "user", "content": fixture.prompt}],
         "tools": [f.openai_tool() for f in tool_fixtures],
         "tool_choice": _tool_choice(recipe, fixture),
         "max_tokens": settings.get("max_tokens", 256), "temperature": 0},
        label=f"stream-tool-{fixture.name}",
    )
    gate.measure(chunks=result.chunks, saw_done=result.saw_done, usage_chunk=result.usage is not None,
                 tool_calls=len(result.tool_calls), finish_reason=result.finish_reason,
                 ttft_s=result.ttft_s, e2e_s=result.e2e_s)
    problems = check_stream_tool(result, fixture, value_checks=bool(recipe.gate("tools").get("value_checks")))
    assert not problems, "streaming tool: " + "; ".join(problems)
    gate.summary("pass")


@pytest.mark.gate("tool_continuation")
def test_tool_continuation(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                           tool_fixtures: list[ToolFixture]) -> None:
    """Tool-result continuation: after the tool's result the model answers and does not call again."""
    fixture = tool_fixtures[0]
    tools = [f.openai_tool() for f in tool_fixtures]
    messages: list[dict[str, Any]] = [{"role": "user", "content": fixture.prompt}]
    first = qual_client.chat({"messages": messages, "tools": tools, "tool_choice": _tool_choice(recipe, fixture),
                              "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0},
                             label="continuation-call")
    assert first.status_code == 200, public_failure(first.attempt)
    problems = check_tool_call(first.tool_calls, fixture, value_checks=False)
    assert not problems, "continuation: the first turn did not make a valid call: " + "; ".join(problems)
    call = first.tool_calls[0]
    result_text = json.dumps({"status": "ok", "result": "18 degrees and sunny"})
    messages += [
        {"role": "assistant", "content": first.content or None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result_text},
    ]
    second = qual_client.chat({"messages": messages, "tools": tools, "max_tokens": 128, "temperature": 0},
                              label="continuation-answer")
    assert second.status_code == 200, public_failure(second.attempt)
    gate.measure(finish_reason=second.finish_reason, answer_chars=len(second.content),
                 repeated_calls=len(second.tool_calls))
    repeated = [c for c in second.tool_calls
                if c["function"]["name"] == call["function"]["name"]
                and c["function"]["arguments"] == call["function"]["arguments"]]
    assert not repeated, f"continuation repeated the same call {call['function']['name']} after its result"
    assert second.finish_reason == "stop", f"continuation finished with {second.finish_reason!r}, not 'stop'"
    assert second.content.strip(), "continuation turn has no content"
    gate.summary("pass")


@pytest.mark.gate("responses")
def test_responses(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                   tool_fixtures: list[ToolFixture]) -> None:
    """Responses API at the recipe's reasoning effort, with a function-call round trip if enabled."""
    settings = recipe.gate("responses")
    effort = settings.get("reasoning_effort")
    body: dict[str, Any] = {"input": recipe.gate("smoke").get("prompt", "Say cloud."),
                            "max_output_tokens": settings.get("max_output_tokens", 256), "temperature": 0}
    if effort:
        body["reasoning"] = {"effort": effort}
    result = qual_client.responses(body, label=f"responses-{effort or 'default'}")
    assert result.status_code == 200, public_failure(result.attempt)
    gate.measure(status=result.status, output_types=result.output_types,
                 input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                 reasoning_effort=effort)
    assert result.status == "completed", f"Responses status is {result.status!r}, not 'completed'"
    assert result.output_text.strip(), f"Responses output has no output_text: {result.output}"
    assert (result.input_tokens or 0) > 0 and (result.output_tokens or 0) > 0, f"Responses usage: {result.usage}"
    if not settings.get("function_call", False):
        gate.summary("pass")
        return
    fixture = tool_fixtures[0]
    call_body: dict[str, Any] = {"input": fixture.prompt, "tools": [fixture.responses_tool()],
                                 "max_output_tokens": settings.get("max_output_tokens", 256), "temperature": 0}
    if effort:
        call_body["reasoning"] = {"effort": effort}
    call_result = qual_client.responses(call_body, label="responses-function-call")
    assert call_result.status_code == 200, public_failure(call_result.attempt)
    calls = call_result.function_calls
    problems = check_tool_call([{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls],
                               fixture, value_checks=False)
    assert not problems, "Responses function call: " + "; ".join(problems)
    follow: dict[str, Any] = {
        "input": [{"role": "user", "content": fixture.prompt}, calls[0],
                  {"type": "function_call_output", "call_id": calls[0].get("call_id"),
                   "output": json.dumps({"status": "ok", "result": "18 degrees and sunny"})}],
        "tools": [fixture.responses_tool()],
        "max_output_tokens": settings.get("max_output_tokens", 256), "temperature": 0,
    }
    if effort:
        follow["reasoning"] = {"effort": effort}
    answer = qual_client.responses(follow, label="responses-function-output")
    assert answer.status_code == 200, public_failure(answer.attempt)
    gate.measure(function_call=fixture.name, round_trip_status=answer.status)
    assert answer.status == "completed", f"round-trip status {answer.status!r}"
    assert answer.output_text.strip(), "the Responses round trip ended without output_text"
    gate.summary("pass")
