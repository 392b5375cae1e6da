"""The functional preflight, one function per gate: smoke, JSON, typed tools, streaming tool,
tool-result continuation, the Responses API and the official ``openai`` SDK path.

Each function sends the gate's requests through the client (every call recorded into the
gate), writes the gate's measurements, thresholds and summary, and returns a ``GateVerdict``
with the first rule that broke, in the words the test fails with, and whose failure it is
(``FailureKind``: a request the server did not answer is never the model's). The shipped tests in
``suites/`` are one call and one assertion each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.client.sdk import (
    SdkResult,
    record_sdk_attempt,
    sdk_chat,
    sdk_client,
    sdk_responses,
    sdk_stream_tool_call,
    sdk_version,
)
from pytest_vllmqual.client.sdk_findings import SdkFinding
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.privacy.public_text import quote_answer
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import Attempt, FailureKind, worst_failure

from .declared import declaration, judged
from .in_flight import each_in_order, gate_in_flight
from .recorder import GateRecorder
from .schema_checks import check_json_content
from .smoke import SMOKE_PROMPT, run_smoke
from .tool_checks import (
    ToolProblem,
    auto_tool_choice,
    check_stream_tool,
    check_tool_call,
    tool_call_problems,
    tool_flags_problem,
)
from .tool_fixtures import ToolCase, recipe_tool_fixtures
from .verdict import GateVerdict, failed_request

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


def _tool_choice(recipe: Recipe, fixture: ToolCase) -> Any:
    mode = recipe.gate("tools").get("tool_choice", "auto")
    if mode == "named":
        return {"type": "function", "function": {"name": fixture.name}}
    return mode


def smoke_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Smoke: a short chat completion finishes as the recipe allows (``gates.smoke.finish_reasons``,
    default stop) with content, usage and the recipe's expected text (``expect_substring``)."""
    return gate.ended(_smoke(client, recipe, gate))


def _smoke(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    smoke = run_smoke(client, recipe, label="smoke")
    result, rule = smoke.chat, smoke.rule
    if result.status_code != 200:
        return failed_request(result.attempt, recipe, what="smoke returned ")
    gate.measure(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                 latency_s=round(result.attempt.latency_s or 0.0, 4),
                 finish_reason=result.finish_reason)
    gate.threshold(finish_reasons=list(rule.finish_reasons), expect_substring=rule.expect)
    finish = rule.finish_problem(result.finish_reason)
    if finish:
        return GateVerdict(f"smoke {finish}", kind=FailureKind.MODEL_BEHAVIOUR)
    if not result.content.strip():
        return GateVerdict("smoke returned empty content", kind=FailureKind.MODEL_BEHAVIOUR)
    if not ((result.prompt_tokens or 0) > 0 and (result.completion_tokens or 0) > 0):
        return GateVerdict(f"smoke usage is incomplete: {result.usage}", kind=FailureKind.SERVER_ERROR)
    lacking = rule.text_problem(result.content)
    if lacking:
        return GateVerdict(f"smoke {lacking}", kind=FailureKind.MODEL_BEHAVIOUR)
    gate.summary("pass" if result.finish_reason == "stop" else f"pass (finished with {result.finish_reason!r}, "
                 "which the recipe allows)")
    return GateVerdict()


def json_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """JSON: response_format json_schema; content parses, validates, finish_reason stop."""
    return gate.ended(_json(client, recipe, gate))


def _json(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    result = client.chat(
        {"messages": [{"role": "user", "content": JSON_PROMPT}],
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "city_country", "schema": JSON_SCHEMA, "strict": True}},
         "max_tokens": recipe.gate("json").get("max_tokens", 128), "temperature": 0},
        label="json_schema",
    )
    if result.status_code != 200:
        return failed_request(result.attempt, recipe)
    gate.measure(content_chars=len(result.content), finish_reason=result.finish_reason,
                 completion_tokens=result.completion_tokens)
    problems = check_json_content(result.content, JSON_SCHEMA, result.finish_reason)
    if problems:
        return GateVerdict("JSON gate: " + "; ".join(problems), kind=FailureKind.MODEL_BEHAVIOUR)
    gate.summary("pass")
    return GateVerdict()


@dataclass
class _ToolCase:
    """One typed tool asked ``runs`` times: how often it passed and what broke, said once each."""

    name: str
    runs: int
    passed: int = 0
    problems: list[ToolProblem] = field(default_factory=list)
    failed_attempt: Attempt | None = None
    kinds: set[FailureKind] = field(default_factory=set)

    def add(self, problems: list[ToolProblem], attempt: Attempt,
            kind: FailureKind = FailureKind.MODEL_BEHAVIOUR) -> None:
        if not problems:
            self.passed += 1
            return
        self.failed_attempt = self.failed_attempt or attempt
        self.kinds.add(kind)
        self.problems += [p for p in problems if p not in self.problems]

    def reason(self) -> str:
        runs = f" {self.passed}/{self.runs}" if self.runs > 1 else ""
        return f"{self.name}{runs}: {', '.join(p.text for p in self.problems)}"

    def record(self) -> dict[str, Any]:
        """The failed case as the report keeps it: k of N, paths and kinds, the first failed
        answer by SHA-256 (its bytes stay in the private folder)."""
        attempt = self.failed_attempt
        return {"tool": self.name, "passed": self.passed, "runs": self.runs,
                "paths": [p.path or "" for p in self.problems], "kinds": [p.kind for p in self.problems],
                "request_sha256": attempt.request_sha256 if attempt else None,
                "response_sha256": attempt.response_sha256 if attempt else None,
                "response_artifact": attempt.response_artifact if attempt else None}


def _tool_case(client: QualClient, recipe: Recipe, fixture: ToolCase, all_tools: list[dict[str, Any]],
               runs: int) -> _ToolCase:
    settings = recipe.gate("tools")
    case = _ToolCase(fixture.name, runs)
    for run in range(1, runs + 1):
        result = client.chat(
            {"messages": [{"role": "user", "content": fixture.prompt}], "tools": all_tools,
             "tool_choice": _tool_choice(recipe, fixture),
             "max_tokens": settings.get("max_tokens", 256), "temperature": 0},
            label=f"tool-{fixture.name}" + (f"-run{run}" if runs > 1 else ""),
        )
        if result.status_code != 200:
            failed = failed_request(result.attempt, recipe, auto_tools=auto_tool_choice(_tool_choice(recipe, fixture)))
            what = f"HTTP {result.status_code}" if result.status_code else str(result.attempt.error_kind or "no answer")
            case.add([ToolProblem(failed.failure or what, what)], result.attempt, failed.kind or FailureKind.SERVER_ERROR)
            continue
        case.add(tool_call_problems(result.tool_calls, fixture,
                                    value_checks=bool(settings.get("value_checks", False))), result.attempt)
    return case


def tools_in_flight(recipe: Recipe) -> int:
    """How many typed-tool cases are asked at once (``gates.tools.in_flight``, default 1: each case
    alone, as an operator's preflight asks them). A request the server did not answer fails its own
    case only, at any setting (as one at a time does)."""
    return gate_in_flight(recipe, "tools")


def tools_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
               tool_fixtures: list[ToolCase]) -> GateVerdict:
    """Typed tools N/N: every tool called by name with schema-valid arguments.

    With ``gates.tools.repeat: R`` each case is asked R times and the record says k of R per
    case, so a recipe can ask whether a failure reproduces; the gate passes only when every case
    passes every time (R = 1, the default, asks each case once). A failed case is recorded with
    the schema path and the kind of value that broke, and its first failed answer by SHA-256.

    Declared not applicable (``gates.tools.not_applicable``), it still runs and is judged against
    the declaration.
    """
    return judged(recipe, gate, declaration(recipe, "tools"), _typed_tools(client, recipe, gate, tool_fixtures))


def _typed_tools(client: QualClient, recipe: Recipe, gate: GateRecorder,
               tool_fixtures: list[ToolCase]) -> GateVerdict:
    settings = recipe.gate("tools")
    runs = int(settings.get("repeat", 1))
    chosen = tool_fixtures[:settings.get("count", 20)]
    all_tools = [f.openai_tool() for f in tool_fixtures]
    in_flight = tools_in_flight(recipe)
    cases = each_in_order(lambda fixture: _tool_case(client, recipe, fixture, all_tools, runs), chosen, in_flight,
                          "tools")
    failed = [case for case in cases if case.passed < case.runs]
    passed = len(chosen) - len(failed)
    mode = settings.get("tool_choice", "auto")
    each = f", {runs} runs each" if runs > 1 else ""
    gate.summary(f"{passed}/{len(chosen)}" + (f" ({runs} runs each)" if runs > 1 else ""))
    gate.measure(passed=passed, total=len(chosen), tool_choice=mode,
                 value_checks=bool(settings.get("value_checks", False)), repeat=runs, in_flight=in_flight,
                 passed_runs=sum(case.passed for case in cases), total_runs=len(chosen) * runs,
                 failed_cases=[case.record() for case in failed],
                 items={case.name: case.passed == case.runs for case in cases})  # per item, for flips
    gate.threshold(required=f"{len(chosen)}/{len(chosen)}" + (f", each {runs}/{runs}" if runs > 1 else ""))
    if failed:
        return GateVerdict(f"typed tools {passed}/{len(chosen)} (tool_choice={mode}{each}): "
                           + "; ".join(case.reason() for case in failed),
                           kind=worst_failure(kind for case in failed for kind in case.kinds))
    return GateVerdict()


def streaming_tool_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                        tool_fixtures: list[ToolCase]) -> GateVerdict:
    """Streaming tool: deltas reassemble into one valid call; [DONE] and a usage chunk arrive.
    Declared not applicable (``gates.streaming_tool.not_applicable``), it still runs and is judged
    against the declaration."""
    verdict = _streaming_tool(client, recipe, gate, tool_fixtures)
    return judged(recipe, gate, declaration(recipe, "streaming_tool"), verdict)


def _streaming_tool(client: QualClient, recipe: Recipe, gate: GateRecorder,
                        tool_fixtures: list[ToolCase]) -> GateVerdict:
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
    if result.status_code != 200:
        failed = failed_request(result.attempt, recipe, auto_tools=auto_tool_choice(_tool_choice(recipe, fixture)),
                                what="streaming tool: ")
        return GateVerdict("; ".join([failed.failure or "", *result.violations]), kind=failed.kind)
    problems = check_stream_tool(result, fixture, value_checks=bool(recipe.gate("tools").get("value_checks")))
    if problems:
        return GateVerdict("streaming tool: " + "; ".join(problems), kind=_stream_kind(result))
    gate.summary("pass")
    return GateVerdict()


def _stream_kind(result: StreamResult) -> FailureKind:
    """A stream that broke its contract or carried an error event is the server's failure; a call
    beside another finish reason than ``tool_calls``, the API's field; what the call broke, the model's."""
    if not result.attempt.ok:
        return result.attempt.failure_kind
    if result.tool_calls and result.finish_reason != "tool_calls":
        return FailureKind.SERVER_ERROR
    return FailureKind.MODEL_BEHAVIOUR


def tool_continuation_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                           tool_fixtures: list[ToolCase]) -> GateVerdict:
    """Tool-result continuation: after the tool's result the model answers and does not call again.
    Declared not applicable (``gates.tool_continuation.not_applicable``), it still runs and is
    judged against the declaration."""
    verdict = _tool_continuation(client, recipe, gate, tool_fixtures)
    return judged(recipe, gate, declaration(recipe, "tool_continuation"), verdict)


def _tool_continuation(client: QualClient, recipe: Recipe, gate: GateRecorder,
                           tool_fixtures: list[ToolCase]) -> GateVerdict:
    fixture = tool_fixtures[0]
    tools = [f.openai_tool() for f in tool_fixtures]
    messages: list[dict[str, Any]] = [{"role": "user", "content": fixture.prompt}]
    first = client.chat({"messages": messages, "tools": tools, "tool_choice": _tool_choice(recipe, fixture),
                         "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0},
                        label="continuation-call")
    if first.status_code != 200:
        return failed_request(first.attempt, recipe, auto_tools=auto_tool_choice(_tool_choice(recipe, fixture)))
    problems = check_tool_call(first.tool_calls, fixture, value_checks=False)
    if problems:
        return GateVerdict("continuation: the first turn did not make a valid call: " + "; ".join(problems),
                           kind=FailureKind.MODEL_BEHAVIOUR)
    call = first.tool_calls[0]
    messages += [
        {"role": "assistant", "content": first.content or None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT},
    ]
    second = client.chat({"messages": messages, "tools": tools, "max_tokens": 128, "temperature": 0},
                         label="continuation-answer")
    if second.status_code != 200:  # tools without a tool_choice: vLLM's default, auto
        return failed_request(second.attempt, recipe, auto_tools=True)
    gate.measure(finish_reason=second.finish_reason, answer_chars=len(second.content),
                 repeated_calls=len(second.tool_calls))
    repeated = [c for c in second.tool_calls
                if c["function"]["name"] == call["function"]["name"]
                and c["function"]["arguments"] == call["function"]["arguments"]]
    if repeated:
        return GateVerdict(f"continuation repeated the same call {call['function']['name']} after its result",
                           kind=FailureKind.MODEL_BEHAVIOUR)
    if second.finish_reason != "stop":
        return GateVerdict(f"continuation finished with {second.finish_reason!r}, not 'stop'", kind=FailureKind.MODEL_BEHAVIOUR)
    if not second.content.strip():
        return GateVerdict("continuation turn has no content", kind=FailureKind.MODEL_BEHAVIOUR)
    gate.summary("pass")
    return GateVerdict()


def _with_effort(body: dict[str, Any], effort: Any) -> dict[str, Any]:
    return {**body, "reasoning": {"effort": effort}} if effort else body


def responses_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                   tool_fixtures: list[ToolCase]) -> GateVerdict:
    """Responses API at the recipe's reasoning effort, with a function-call round trip if enabled.

    ``gates.responses.not_applicable`` declares the function call alone: it still runs and is
    judged against the declaration, while the plain answer must pass as always.
    """
    plain = _responses_plain(client, recipe, gate)
    if plain is not None:
        return gate.ended(plain)
    if not recipe.gate("responses").get("function_call", False):
        gate.summary("pass")
        return gate.ended(GateVerdict())
    verdict = _responses_round_trip(client, recipe, gate, tool_fixtures[0])
    gate.summary("pass" if verdict.passed else "the plain answer passed; the function call round trip did not")
    return judged(recipe, gate, declaration(recipe, "responses"), verdict)


def _status_kind(status: str | None) -> FailureKind:
    """A Responses answer that ran out of output tokens (``incomplete``) is the model's; any other
    status than ``completed`` is the server's."""
    return FailureKind.MODEL_BEHAVIOUR if status == "incomplete" else FailureKind.SERVER_ERROR


def _responses_plain(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict | None:
    """The plain Responses answer: what broke, or None."""
    settings = recipe.gate("responses")
    effort = settings.get("reasoning_effort")
    body = _with_effort({"input": recipe.gate("smoke").get("prompt", SMOKE_PROMPT),
                         "max_output_tokens": settings.get("max_output_tokens", 256), "temperature": 0}, effort)
    result = client.responses(body, label=f"responses-{effort or 'default'}")
    if result.status_code != 200:
        return failed_request(result.attempt, recipe)
    gate.measure(status=result.status, output_types=result.output_types,
                 input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                 reasoning_effort=effort)
    if result.status != "completed":
        return GateVerdict(f"Responses status is {result.status!r}, not 'completed'", kind=_status_kind(result.status))
    if not result.output_text.strip():
        return GateVerdict(f"Responses output has no output_text: {quote_answer(result.output)}", kind=FailureKind.MODEL_BEHAVIOUR)
    if not ((result.input_tokens or 0) > 0 and (result.output_tokens or 0) > 0):
        return GateVerdict(f"Responses usage: {result.usage}", kind=FailureKind.SERVER_ERROR)
    return None


def _responses_round_trip(client: QualClient, recipe: Recipe, gate: GateRecorder, fixture: ToolCase) -> GateVerdict:
    """A function call through the Responses API (its tools for vLLM's tool parser: no tool_choice
    is auto) and the answer to its output."""
    settings = recipe.gate("responses")
    effort = settings.get("reasoning_effort")
    max_output_tokens = settings.get("max_output_tokens", 256)
    call_body = _with_effort({"input": fixture.prompt, "tools": [fixture.responses_tool()],
                              "max_output_tokens": max_output_tokens, "temperature": 0}, effort)
    call_result = client.responses(call_body, label="responses-function-call")
    if call_result.status_code != 200:
        return failed_request(call_result.attempt, recipe, auto_tools=True)
    calls = call_result.function_calls
    problems = check_tool_call([{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls],
                               fixture, value_checks=False)
    if problems:
        return GateVerdict("Responses function call: " + "; ".join(problems), kind=FailureKind.MODEL_BEHAVIOUR)
    follow = _with_effort({
        "input": [{"role": "user", "content": fixture.prompt}, calls[0],
                  {"type": "function_call_output", "call_id": calls[0].get("call_id"), "output": TOOL_RESULT}],
        "tools": [fixture.responses_tool()], "max_output_tokens": max_output_tokens, "temperature": 0,
    }, effort)
    answer = client.responses(follow, label="responses-function-output")
    if answer.status_code != 200:
        return failed_request(answer.attempt, recipe, auto_tools=True)
    gate.measure(function_call=fixture.name, round_trip_status=answer.status)
    if answer.status != "completed":
        return GateVerdict(f"round-trip status {answer.status!r}", kind=_status_kind(answer.status))
    if not answer.output_text.strip():
        return GateVerdict("the Responses round trip ended without output_text", kind=FailureKind.MODEL_BEHAVIOUR)
    return GateVerdict()


def openai_sdk_gate(server: ServerHandle, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """openai SDK, as applications use it: chat, a streamed tool call and a Responses answer
    read through the SDK as shipped (lenient parsing), each giving what an application uses.

    Every answer is also validated strictly against the SDK's models; each deviation is a named
    finding in the record (``findings``). A finding fails the gate only when the recipe sets
    ``gates.openai_sdk.strict: true``: an application using the SDK as shipped reads such an
    answer fine, so by default it is reported, not held against the server.
    """
    strict = bool(recipe.gate("openai_sdk").get("strict", False))
    version = sdk_version()
    client = sdk_client(server.base_url, server.api_key, timeout_s=recipe.requests.timeout_s)
    model = server.served_model_name
    smoke = recipe.gate("smoke")
    fixtures = recipe_tool_fixtures(recipe)
    responses = recipe.gate("responses")
    gate.measure(sdk_version=version, strict=strict)
    chat = sdk_chat(client, model, smoke.get("prompt", SMOKE_PROMPT), max_tokens=smoke.get("max_tokens", 16))
    tool = sdk_stream_tool_call(client, model, fixtures[0].prompt, [f.openai_tool() for f in fixtures],
                                tool_choice=_tool_choice(recipe, fixtures[0]),
                                max_tokens=recipe.gate("streaming_tool").get("max_tokens", 256))
    answer = sdk_responses(client, model, smoke.get("prompt", SMOKE_PROMPT),
                           max_output_tokens=responses.get("max_output_tokens", 256),
                           reasoning_effort=responses.get("reasoning_effort"))
    for result in (chat, tool, answer):
        record_sdk_attempt(gate, result)
    findings = [f for result in (chat, tool, answer) for f in result.findings]
    gate.measure(chat_s=round(chat.seconds, 3), chat_finish_reason=chat.finish_reason,
                 stream_s=round(tool.seconds, 3), stream_chunks=tool.chunks, stream_tool=tool.tool_name,
                 responses_s=round(answer.seconds, 3), responses_status=answer.status,
                 strict_findings=len(findings), findings=[f.to_dict() for f in findings])
    gate.threshold(strict=strict)
    _tool_flags_said(recipe, tool, _tool_choice(recipe, fixtures[0]))
    failed = [r for r in (chat, tool, answer) if r.failure]
    declared = declaration(recipe, "openai_sdk")  # covers the streamed tool call alone
    if failed and not (declared and failed == [tool]):
        gate.summary(f"openai {version} as shipped could not give an application what it reads")
        return gate.ended(GateVerdict(f"openai {version} as shipped (lenient parsing): "
                                      + "; ".join(r.failure or "" for r in failed),
                                      kind=worst_failure(r.failure_kind for r in failed)))
    noted = _findings_text(findings)
    if strict and findings:
        gate.summary(f"openai {version} strict validation: {len(findings)} finding(s)")
        return gate.ended(GateVerdict(f"strict validation (gates.openai_sdk.strict: true): {noted}",
                                      kind=FailureKind.SERVER_ERROR))
    if tool.failure:
        gate.summary(f"chat and Responses read by openai {version} as an application does; the streamed tool "
                     "call was not")
        return judged(recipe, gate, declared, GateVerdict(f"openai {version} as shipped (lenient parsing): "
                                                          f"{tool.failure}", kind=tool.failure_kind))
    gate.summary(f"chat, streamed tool call ({tool.chunks} chunks) and Responses read by openai {version} "
                 "as an application does" + (f"; strict validation noted {noted}" if findings else
                                             "; strict validation found nothing"))
    return judged(recipe, gate, declared, GateVerdict())


def _tool_flags_said(recipe: Recipe, tool: SdkResult, tool_choice: Any) -> None:
    """The SDK's streamed tool call answered HTTP 400 because of the recipe's missing tool flags:
    its failure names them, and is the recipe's (``config``)."""
    flags = tool_flags_problem(recipe, tool.exchange.status_code, auto_tools=auto_tool_choice(tool_choice))
    if tool.failure and flags:
        tool.failure, tool.failure_kind = f"{tool.failure}; {flags}", FailureKind.CONFIG


def _findings_text(findings: list[SdkFinding], shown: int = 3) -> str:
    """"N finding(s): the first few, one line each", each said once."""
    more = f"; and {len(findings) - shown} more" if len(findings) > shown else ""
    return f"{len(findings)} finding(s): " + "; ".join(f.text() for f in findings[:shown]) + more
