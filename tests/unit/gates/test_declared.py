"""A declaration excuses the model, never the server: a declared gate whose failure is the
server's (an HTTP 500, a timeout) or the recipe's own flags (tools without the auto tool choice
flags) fails; only a failure in the model's answers ends skipped with the declaration.

The server is replayed through httpx.MockTransport (a real vLLM cannot be made to answer 500 or
time out on demand); the gates are the shipped ones, called as the suites call them."""

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
    QualClient,
    Recipe,
    ServerHandle,
    repeated_check_gate,
    streaming_tool_gate,
    tool_continuation_gate,
    tools_gate,
)
from pytest_vllmqual.gates.checks import ToolCase
from pytest_vllmqual.records import LauncherKind

WEATHER = ToolCase(
    name="get_weather", description="Weather.", prompt="Weather in Lima?",
    parameters={"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    expected={"city": "Lima"},
)
DECLARED = "its chat template has no tools"
SERVER_TEXT = "Traceback in /srv/engine/secret_path.py: overloaded at 10.1.2.3"

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::tools", gate="tools", title="tools"), tmp_path)


def declared(recipe: Recipe, *blocks: str, serve: dict[str, Any] | None = None) -> Recipe:
    """The recipe with each ``gates.<block>.not_applicable`` set (and serve settings changed)."""
    gates = {**recipe.gates, **{b: {**recipe.gate(b), "not_applicable": DECLARED} for b in blocks}}
    changed = dataclasses.replace(recipe, gates=gates)
    return dataclasses.replace(changed, serve=dataclasses.replace(recipe.serve, **serve)) if serve else changed


def client(handler: Handler) -> QualClient:
    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                      timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    return qual


def status(code: int, message: str = SERVER_TEXT) -> Handler:
    return lambda request: httpx.Response(code, json={"error": {"message": message, "type": "x", "code": code}})


def timing_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def prose(request: httpx.Request) -> httpx.Response:
    """A model without tools: it answers the tool prompt in prose (HTTP 200)."""
    return httpx.Response(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "It is sunny in Lima."}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}})


@pytest.mark.parametrize(("handler", "kind"), [(status(500), "server_error"), (status(503), "server_error"),
                                               (timing_out, "transport")], ids=["http-500", "http-503", "timeout"])
def test_a_declared_tools_gate_fails_when_the_server_fails(tiny: Recipe, recorder: GateRecorder,
                                                           handler: Handler, kind: str) -> None:
    verdict = tools_gate(client(handler), declared(tiny, "tools"), recorder, [WEATHER])
    assert verdict.skip_reason is None, f"the server's failure was excused by the declaration: {verdict.skip_reason}"
    assert verdict.failure is not None and "typed tools 0/1" in verdict.failure
    assert "excuses only the model's answers" in verdict.failure
    assert SERVER_TEXT not in verdict.failure and "secret_path" not in verdict.failure
    assert verdict.kind == kind and recorder.record.failure_kind == kind
    assert recorder.record.measurements["measured_outcome"] == "failed"


def test_a_declared_tools_gate_still_skips_when_the_model_answers_in_prose(tiny: Recipe,
                                                                        recorder: GateRecorder) -> None:
    verdict = tools_gate(client(prose), declared(tiny, "tools"), recorder, [WEATHER])
    assert verdict.failure is None and verdict.skip_reason is not None
    assert verdict.skip_reason.startswith(f"not applicable to recipe tiny-cpu: {DECLARED} (declared; this run "
                                          "measured: typed tools 0/1 (tool_choice=auto): get_weather: no tool call")
    assert recorder.record.measurements["measured_outcome"] == "failed"


def test_a_declared_gate_skipped_for_its_models_answers_keeps_whose_failure_it_measured(
        tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = tools_gate(client(prose), declared(tiny, "tools"), recorder, [WEATHER])
    assert verdict.skip_reason is not None and recorder.record.failure_kind == "model_behaviour"


@pytest.mark.parametrize("handler", [status(500), timing_out], ids=["http-500", "timeout"])
def test_a_declared_streaming_tool_and_continuation_fail_when_the_server_fails(tiny: Recipe, recorder: GateRecorder,
                                                                             handler: Handler) -> None:
    recipe = declared(tiny, "streaming_tool", "tool_continuation")
    streamed = streaming_tool_gate(client(handler), recipe, recorder, [WEATHER])
    assert streamed.skip_reason is None and streamed.failure is not None
    continued = tool_continuation_gate(client(handler), recipe, recorder, [WEATHER])
    assert continued.skip_reason is None and continued.failure is not None


def test_a_declared_quality_check_fails_when_the_server_fails(tiny: Recipe, recorder: GateRecorder) -> None:
    """tiny-cpu declares its arithmetic checks; a 500 on every ask is not the model's arithmetic."""
    verdict = repeated_check_gate(client(status(500)), tiny, recorder, "intelligence",
                                  {"name": "sum", "prompt": "2+2?", "answer": 4})
    assert verdict.skip_reason is None and verdict.failure is not None
    assert verdict.failure.startswith("sum: 0/3 answers matched final number 4")


def test_a_400_that_the_recipes_missing_tool_flags_cause_fails_and_names_the_flags(tiny: Recipe,
                                                                                recorder: GateRecorder) -> None:
    """tool_choice auto needs --enable-auto-tool-choice and --tool-call-parser; a recipe without them
    gets HTTP 400 for every tool request, whatever it declares."""
    recipe = declared(tiny, "tools", serve={"enable_auto_tool_choice": False, "tool_call_parser": None})
    verdict = tools_gate(client(status(400, '"auto" tool choice requires --enable-auto-tool-choice and '
                                            '--tool-call-parser to be set')), recipe, recorder, [WEATHER])
    assert verdict.skip_reason is None, f"the recipe's own flags were excused: {verdict.skip_reason}"
    assert verdict.failure is not None
    assert "serve.enable_auto_tool_choice" in verdict.failure and "serve.tool_call_parser" in verdict.failure
    assert "--enable-auto-tool-choice" in verdict.failure and "--tool-call-parser" in verdict.failure
    assert recorder.record.failure_kind == "config"


def test_a_400_names_only_the_flag_the_recipe_lacks(tiny: Recipe, recorder: GateRecorder) -> None:
    recipe = declared(tiny, "tools", serve={"tool_call_parser": None})
    verdict = tools_gate(client(status(400)), recipe, recorder, [WEATHER])
    assert verdict.failure is not None and "--tool-call-parser" in verdict.failure
    assert "--enable-auto-tool-choice" not in verdict.failure


def test_a_400_with_the_flags_set_is_the_servers(tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = tools_gate(client(status(400)), declared(tiny, "tools"), recorder, [WEATHER])
    assert verdict.failure is not None and "--tool-call-parser" not in verdict.failure
    assert "HTTP 400" in verdict.failure and recorder.record.failure_kind == "server_error"


def test_a_streamed_400_is_said_as_the_tools_gate_says_it(tiny: Recipe, recorder: GateRecorder) -> None:
    """One policy for server text in a failure: the streaming tool gate withheld the server's 400 text
    as the tools gate does (known vLLM templates re-rendered, the rest withheld)."""
    verdict = streaming_tool_gate(client(status(400)), tiny, recorder, [WEATHER])
    assert verdict.failure is not None and "HTTP 400" in verdict.failure
    assert SERVER_TEXT not in verdict.failure and "10.1.2.3" not in verdict.failure
    assert "the server's message is withheld" in verdict.failure
    tools = tools_gate(client(status(400)), tiny, recorder, [WEATHER])
    assert tools.failure is not None and "the server's message is withheld" in tools.failure


def test_a_known_vllm_400_is_re_rendered_in_the_streaming_tool_gate(tiny: Recipe, recorder: GateRecorder) -> None:
    said = ("This model's maximum context length is 4096 tokens. However, your prompt contains at least 5000 input "
            "tokens, which exceeds this limit even without any output tokens. (parameter=input_tokens, value=5000) "
            "/srv/secret")
    verdict = streaming_tool_gate(client(status(400, said)), tiny, recorder, [WEATHER])
    assert verdict.failure is not None and "maximum context length is 4096 tokens" in verdict.failure
    assert "/srv/secret" not in verdict.failure


def test_the_tool_requests_sent_are_the_ones_classified(tiny: Recipe, recorder: GateRecorder) -> None:
    """The config rule reads the request's own tool_choice: a named choice needs no parser flags."""
    sent: list[dict[str, Any]] = []

    def seen(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return status(400)(request)

    recipe = declared(tiny, "tools", serve={"enable_auto_tool_choice": False, "tool_call_parser": None})
    recipe = dataclasses.replace(recipe, gates={**recipe.gates, "tools": {**recipe.gate("tools"),
                                                                         "tool_choice": "named"}})
    verdict = tools_gate(client(seen), recipe, recorder, [WEATHER])
    assert sent and sent[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert verdict.skip_reason is None and verdict.failure is not None
    assert "--tool-call-parser" not in verdict.failure


def test_an_endpoint_the_run_does_not_start_is_not_held_to_the_recipes_flags(tiny: Recipe,
                                                                          recorder: GateRecorder) -> None:
    """Direct-only, the server's flags are not the recipe's: its 400 is the server's."""
    recipe = declared(tiny, "tools", serve={"enable_auto_tool_choice": False, "tool_call_parser": None})
    recipe = dataclasses.replace(recipe, launcher=dataclasses.replace(recipe.launcher, kind=LauncherKind.EXTERNAL))
    verdict = tools_gate(client(status(400)), recipe, recorder, [WEATHER])
    assert verdict.failure is not None and "--tool-call-parser" not in verdict.failure
    assert recorder.record.failure_kind == "server_error"

