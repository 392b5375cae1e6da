"""The functional preflight, one function per gate: smoke, JSON, typed tools, streaming tool,
tool-result continuation, the Responses API and the official ``openai`` SDK path.

Each function sends the gate's requests through the client (every call recorded into the
gate), writes the gate's measurements, thresholds and summary, and returns a ``GateVerdict``
with the first rule that broke, in the words the test fails with. The shipped tests in
``suites/`` are one call and one assertion each.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.sdk import sdk_chat, sdk_client, sdk_responses, sdk_stream_tool_call
from pytest_vllmqual.errors import SdkParseError
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.privacy.public_text import public_failure
from pytest_vllmqual.recipe.loader import Recipe

from .checks import (
    GateVerdict,
    ToolFixture,
    check_json_content,
    check_stream_tool,
    check_tool_call,
    recipe_tool_fixtures,
    run_smoke,
)
from .recorder import GateRecorder

__all__ = ["JSON_PROMPT", "JSON_SCHEMA", "json_gate", "openai_sdk_gate", "responses_gate", "smoke_gate",
           "streaming_tool_gate", "tool_continuation_gate", "tools_gate"]

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
TOOL_RESULT = json.dumps({"status": "ok", "result": "18 degrees and sunny"})


def _tool_choice(recipe: Recipe, fixture: ToolFixture) -> Any:
    mode = recipe.gate("tools").get("tool_choice", "auto")
    if mode == "named":
        return {"type": "function", "function": {"name": fixture.name}}
    return mode


def smoke_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Smoke: a short chat completion finishes with content and usage."""
    settings = recipe.gate("smoke")
    smoke = run_smoke(client, recipe, label="smoke")
    result = smoke.chat
    if result.status_code != 200:
        return GateVerdict(f"smoke returned {public_failure(result.attempt)}")
    gate.measure(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                 latency_s=round(result.attempt.latency_s or 0.0, 4),
                 finish_reason=result.finish_reason)
    if result.finish_reason != "stop":
        return GateVerdict(f"smoke finished with {result.finish_reason!r}, not 'stop': the model did not end "
                           f"its answer within {smoke.max_tokens} tokens")
    if not result.content.strip():
        return GateVerdict("smoke returned empty content")
    if not ((result.prompt_tokens or 0) > 0 and (result.completion_tokens or 0) > 0):
        return GateVerdict(f"smoke usage is incomplete: {result.usage}")
    expected = settings.get("expect_substring")
    if expected and expected.lower() not in result.content.lower():
        return GateVerdict(f"smoke answer {result.content!r} lacks {expected!r}")
    gate.summary("pass")
    return GateVerdict()


def json_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """JSON: response_format json_schema; content parses, validates, finish_reason stop."""
    result = client.chat(
        {"messages": [{"role": "user", "content": JSON_PROMPT}],
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "city_country", "schema": JSON_SCHEMA, "strict": True}},
         "max_tokens": recipe.gate("json").get("max_tokens", 128), "temperature": 0},
        label="json_schema",
    )
    if result.status_code != 200:
        return GateVerdict(public_failure(result.attempt))
    gate.measure(content_chars=len(result.content), finish_reason=result.finish_reason,
                 completion_tokens=result.completion_tokens)
    problems = check_json_content(result.content, JSON_SCHEMA, result.finish_reason)
    if problems:
        return GateVerdict("JSON gate: " + "; ".join(problems))
    gate.summary("pass")
    return GateVerdict()


def tools_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
               tool_fixtures: list[ToolFixture]) -> GateVerdict:
    """Typed tools N/N: every tool called by name with schema-valid arguments."""
    settings = recipe.gate("tools")
    count = settings.get("count", 20)
    value_checks = bool(settings.get("value_checks", False))
    chosen = tool_fixtures[:count]
    all_tools = [f.openai_tool() for f in tool_fixtures]
    failures: dict[str, list[str]] = {}
    for fixture in chosen:
        result = client.chat(
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
    if failures:
        return GateVerdict(f"typed tools {passed}/{len(chosen)} (tool_choice={mode}): " + "; ".join(
            f"{name}: {', '.join(p)}" for name, p in failures.items()))
    return GateVerdict()


def streaming_tool_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                        tool_fixtures: list[ToolFixture]) -> GateVerdict:
    """Streaming tool: deltas reassemble into one valid call; [DONE] and a usage chunk arrive."""
    settings = recipe.gate("streaming_tool")
    name = settings.get("tool", tool_fixtures[0].name)
    fixture = next(f for f in tool_fixtures if f.name == name)
    result = client.stream_chat(
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
    if problems:
        return GateVerdict("streaming tool: " + "; ".join(problems))
    gate.summary("pass")
    return GateVerdict()


def tool_continuation_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                           tool_fixtures: list[ToolFixture]) -> GateVerdict:
    """Tool-result continuation: after the tool's result the model answers and does not call again."""
    fixture = tool_fixtures[0]
    tools = [f.openai_tool() for f in tool_fixtures]
    messages: list[dict[str, Any]] = [{"role": "user", "content": fixture.prompt}]
    first = client.chat({"messages": messages, "tools": tools, "tool_choice": _tool_choice(recipe, fixture),
                         "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0},
                        label="continuation-call")
    if first.status_code != 200:
        return GateVerdict(public_failure(first.attempt))
    problems = check_tool_call(first.tool_calls, fixture, value_checks=False)
    if problems:
        return GateVerdict("continuation: the first turn did not make a valid call: " + "; ".join(problems))
    call = first.tool_calls[0]
    messages += [
        {"role": "assistant", "content": first.content or None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT},
    ]
    second = client.chat({"messages": messages, "tools": tools, "max_tokens": 128, "temperature": 0},
                         label="continuation-answer")
    if second.status_code != 200:
        return GateVerdict(public_failure(second.attempt))
    gate.measure(finish_reason=second.finish_reason, answer_chars=len(second.content),
                 repeated_calls=len(second.tool_calls))
    repeated = [c for c in second.tool_calls
                if c["function"]["name"] == call["function"]["name"]
                and c["function"]["arguments"] == call["function"]["arguments"]]
    if repeated:
        return GateVerdict(f"continuation repeated the same call {call['function']['name']} after its result")
    if second.finish_reason != "stop":
        return GateVerdict(f"continuation finished with {second.finish_reason!r}, not 'stop'")
    if not second.content.strip():
        return GateVerdict("continuation turn has no content")
    gate.summary("pass")
    return GateVerdict()


def _with_effort(body: dict[str, Any], effort: Any) -> dict[str, Any]:
    return {**body, "reasoning": {"effort": effort}} if effort else body


def responses_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                   tool_fixtures: list[ToolFixture]) -> GateVerdict:
    """Responses API at the recipe's reasoning effort, with a function-call round trip if enabled."""
    settings = recipe.gate("responses")
    effort = settings.get("reasoning_effort")
    body = _with_effort({"input": recipe.gate("smoke").get("prompt", "Say cloud."),
                         "max_output_tokens": settings.get("max_output_tokens", 256), "temperature": 0}, effort)
    result = client.responses(body, label=f"responses-{effort or 'default'}")
    if result.status_code != 200:
        return GateVerdict(public_failure(result.attempt))
    gate.measure(status=result.status, output_types=result.output_types,
                 input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                 reasoning_effort=effort)
    if result.status != "completed":
        return GateVerdict(f"Responses status is {result.status!r}, not 'completed'")
    if not result.output_text.strip():
        return GateVerdict(f"Responses output has no output_text: {result.output}")
    if not ((result.input_tokens or 0) > 0 and (result.output_tokens or 0) > 0):
        return GateVerdict(f"Responses usage: {result.usage}")
    if settings.get("function_call", False):
        failure = _responses_round_trip(client, gate, tool_fixtures[0], settings, effort)
        if failure is not None:
            return GateVerdict(failure)
    gate.summary("pass")
    return GateVerdict()


def _responses_round_trip(client: QualClient, gate: GateRecorder, fixture: ToolFixture,
                          settings: dict[str, Any], effort: Any) -> str | None:
    """A function call through the Responses API and the answer to its output; what broke, or None."""
    max_output_tokens = settings.get("max_output_tokens", 256)
    call_body = _with_effort({"input": fixture.prompt, "tools": [fixture.responses_tool()],
                              "max_output_tokens": max_output_tokens, "temperature": 0}, effort)
    call_result = client.responses(call_body, label="responses-function-call")
    if call_result.status_code != 200:
        return public_failure(call_result.attempt)
    calls = call_result.function_calls
    problems = check_tool_call([{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls],
                               fixture, value_checks=False)
    if problems:
        return "Responses function call: " + "; ".join(problems)
    follow = _with_effort({
        "input": [{"role": "user", "content": fixture.prompt}, calls[0],
                  {"type": "function_call_output", "call_id": calls[0].get("call_id"), "output": TOOL_RESULT}],
        "tools": [fixture.responses_tool()], "max_output_tokens": max_output_tokens, "temperature": 0,
    }, effort)
    answer = client.responses(follow, label="responses-function-output")
    if answer.status_code != 200:
        return public_failure(answer.attempt)
    gate.measure(function_call=fixture.name, round_trip_status=answer.status)
    if answer.status != "completed":
        return f"round-trip status {answer.status!r}"
    if not answer.output_text.strip():
        return "the Responses round trip ended without output_text"
    return None


def openai_sdk_gate(server: ServerHandle, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """openai SDK: chat, a streamed tool call and a Responses answer all parse into the SDK's types."""
    import openai  # the SDK's own import, paid only by the gate that uses it

    client = sdk_client(server.base_url, server.api_key, timeout_s=recipe.requests.timeout_s)
    model = server.served_model_name
    smoke = recipe.gate("smoke")
    fixtures = recipe_tool_fixtures(recipe)
    fixture = fixtures[0]
    responses = recipe.gate("responses")
    gate.measure(sdk_version=openai.__version__)
    try:
        chat = sdk_chat(client, model, smoke.get("prompt", "Say cloud."), max_tokens=smoke.get("max_tokens", 16))
        gate.measure(chat_s=round(chat.seconds, 3), chat_finish_reason=chat.finish_reason)
        tool = sdk_stream_tool_call(client, model, fixture.prompt, [f.openai_tool() for f in fixtures],
                                    tool_choice=_tool_choice(recipe, fixture),
                                    max_tokens=recipe.gate("streaming_tool").get("max_tokens", 256))
        gate.measure(stream_s=round(tool.seconds, 3), stream_chunks=tool.chunks, stream_tool=tool.tool_name)
        answer = sdk_responses(client, model, smoke.get("prompt", "Say cloud."),
                               max_output_tokens=responses.get("max_output_tokens", 256),
                               reasoning_effort=responses.get("reasoning_effort"))
        gate.measure(responses_s=round(answer.seconds, 3), responses_status=answer.details.get("status"))
    except SdkParseError as exc:
        gate.summary("the openai SDK could not parse the server's answer")
        return GateVerdict(str(exc))
    if not chat.text.strip():
        return GateVerdict("chat through the SDK returned no content")
    if tool.tool_name != fixture.name:
        return GateVerdict(f"streamed tool call named {tool.tool_name!r}, expected {fixture.name!r}")
    try:
        json.loads(tool.tool_arguments or "")
    except ValueError:
        return GateVerdict(f"the streamed tool call's arguments are not JSON: {tool.tool_arguments!r}")
    if not (answer.details.get("status") == "completed" and answer.text.strip()):
        return GateVerdict(f"Responses through the SDK: status {answer.details.get('status')!r}, "
                           f"output_text {answer.text!r}")
    gate.summary(f"chat, streamed tool call ({tool.chunks} chunks) and Responses parsed by openai {openai.__version__}")
    return GateVerdict()
