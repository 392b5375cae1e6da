"""The openai-SDK path reads answers as an application does, and names strict deviations.

A real vLLM always sends answers its own OpenAI models produced, so it cannot be made to send
an unreadable one on demand: these tests use a small HTTP server in this process that answers
each route with a body we choose. The same server answering well-formed bodies proves that the
failures come from the bodies, not from the harness.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support import ROOT

from pytest_vllmqual import (
    GateRecord,
    GateRecorder,
    ServerHandle,
    load_recipe,
    openai_sdk_gate,
    shipped_tool_fixtures,
)
from pytest_vllmqual.client.sdk import (
    record_sdk_attempt,
    sdk_chat,
    sdk_client,
    sdk_responses,
    sdk_stream_tool_call,
    sdk_version,
)
from pytest_vllmqual.records import Attempt

CHAT_OK = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "cloud"}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
TOOL_CHUNKS = [
    {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
        "finish_reason": None}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "{\"city\": \"Paris\"}"}}]}, "finish_reason": None}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
]
RESPONSE_OK = {"id": "r1", "object": "response", "created_at": 1, "model": "m", "status": "completed",
               "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": "cloud", "annotations": []}]}],
               "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
               "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
                         "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                         "output_tokens_details": {"reasoning_tokens": 0}}}


class Scripted:
    """What the server answers per path: a JSON body, or SSE lines for a stream."""

    def __init__(self) -> None:
        self.bodies: dict[str, Any] = {}
        self.status = 200


@pytest.fixture
def server() -> Iterator[tuple[str, Scripted]]:
    script = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            key = self.path + (":stream" if request.get("stream") else "")
            body = script.bodies[key]
            if isinstance(body, list):  # SSE
                payload = "".join(f"data: {line if isinstance(line, str) else json.dumps(line)}\n\n"
                                  for line in body) + "data: [DONE]\n\n"
                data, kind = payload.encode(), "text/event-stream"
            else:
                data, kind = (body if isinstance(body, str) else json.dumps(body)).encode(), "application/json"
            self.send_response(script.status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def client(url: str) -> Any:
    return sdk_client(url, None, timeout_s=10)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def chat(url: str) -> Any:
    return sdk_chat(client(url), "m", "Say cloud.", max_tokens=4)


def stream(url: str) -> Any:
    return sdk_stream_tool_call(client(url), "m", "weather?", TOOLS, tool_choice="auto", max_tokens=16)


def responses(url: str) -> Any:
    return sdk_responses(client(url), "m", "Say cloud.", max_output_tokens=8, reasoning_effort="high")


def test_well_formed_answers_give_an_application_everything_and_no_finding(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": CHAT_OK, "/v1/chat/completions:stream": TOOL_CHUNKS,
                     "/v1/responses": RESPONSE_OK}
    answer = chat(url)
    assert (answer.failure, answer.findings, answer.text, answer.finish_reason) == (None, [], "cloud", "stop")
    assert answer.usage == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    tool = stream(url)
    assert (tool.failure, tool.findings) == (None, [])
    assert (tool.tool_name, json.loads(tool.tool_arguments or "")) == ("get_weather", {"city": "Paris"})
    assert tool.finish_reason == "tool_calls" and tool.chunks == 3
    reply = responses(url)
    assert (reply.failure, reply.findings, reply.text, reply.status) == (None, [], "cloud", "completed")
    assert reply.exchange.status_code == 200 and json.loads(reply.exchange.response) == RESPONSE_OK
    assert json.loads(reply.exchange.request)["reasoning"] == {"effort": "high"}


def test_a_field_only_strict_validation_needs_is_a_finding_not_a_failure(server: tuple[str, Scripted]) -> None:
    """The real case: openai's Response needs usage.input_tokens_details.cache_write_tokens,
    which vLLM 0.24.0 does not send; an application reading output_text never notices."""
    url, script = server
    usage = {**RESPONSE_OK["usage"], "input_tokens_details": {"cached_tokens": 0}}
    script.bodies = {"/v1/responses": {**RESPONSE_OK, "usage": usage}}
    reply = responses(url)
    assert reply.failure is None and (reply.text, reply.status) == ("cloud", "completed")
    (finding,) = reply.findings
    assert (finding.call, finding.model, finding.path, finding.sent) == (
        "responses", "Response", "usage.input_tokens_details.cache_write_tokens", "missing")
    assert finding.sdk_version == sdk_version()
    assert finding.text() == (f"responses: usage.input_tokens_details.cache_write_tokens is missing "
                              f"(openai {sdk_version()}'s Response)")


def test_a_missing_finish_reason_fails_the_read_once(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": {**CHAT_OK, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "cloud"}}]}}
    answer = chat(url)
    assert answer.failure == "chat: choices[0].finish_reason is missing"
    assert [(f.path, f.sent) for f in answer.findings] == [("choices[0].finish_reason", "missing")]


def test_a_string_where_the_sdk_needs_an_object_fails_without_the_servers_text(
        server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": {**CHAT_OK, "choices": [
        {"index": 0, "message": "secret-server-words", "finish_reason": "stop"}]}}
    answer = chat(url)
    assert answer.failure == "chat: choices[0].message is a string where the SDK needs an object"
    assert [(f.path, f.needs, f.sent) for f in answer.findings] == [("choices[0].message", "an object", "string")]
    assert "secret-server-words" not in repr(answer.findings) + answer.failure


def test_usage_counts_must_be_integers(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": {**CHAT_OK, "usage": {**CHAT_OK["usage"], "prompt_tokens": "many"}}}
    assert chat(url).failure == "chat: usage.prompt_tokens is a string, not an integer"


def test_a_finish_reason_outside_the_sdks_values_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": {**CHAT_OK, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "cloud"}, "finish_reason": "abort"}]}}
    failure = chat(url).failure or ""
    assert failure.startswith("chat: choices[0].finish_reason is a string that is none of the SDK's values (stop")
    assert "abort" not in failure


def test_stream_chunk_that_is_not_json_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions:stream": [TOOL_CHUNKS[0], "{\"choices\": [", TOOL_CHUNKS[2]]}
    tool = stream(url)
    assert tool.failure == "streamed tool call: the SDK could not decode the answer (not JSON)"


def test_streamed_arguments_that_are_not_json_fail(server: tuple[str, Scripted]) -> None:
    url, script = server
    broken = json.loads(json.dumps(TOOL_CHUNKS))
    broken[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = "{\"city\": "
    script.bodies = {"/v1/chat/completions:stream": broken}
    assert stream(url).failure == "streamed tool call: the tool call's arguments are not JSON (9 characters)"


def test_stream_findings_count_the_chunks_that_had_them(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions:stream": [{k: v for k, v in c.items() if k != "created"}
                                                     for c in TOOL_CHUNKS]}
    tool = stream(url)
    assert tool.failure is None, "created is not read by an application"
    (finding,) = tool.findings
    assert (finding.path, finding.sent, finding.occurrences, finding.model) == ("created", "missing", 3,
                                                                               "ChatCompletionChunk")


def test_responses_with_wrong_types_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/responses": {**RESPONSE_OK, "output": "cloud"}}  # output must be a list of items
    reply = responses(url)
    assert reply.failure == "responses: output is a string where the SDK needs an array"
    assert [(f.path, f.sent) for f in reply.findings] == [("output", "string")]


def test_an_http_error_is_a_failure_without_the_servers_message(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.status = 500
    script.bodies = {"/v1/chat/completions": {"error": {"message": "secret-engine-words"}}}
    answer = chat(url)
    assert answer.failure == "chat: the server answered HTTP 500"
    assert answer.exchange.status_code == 500 and b"secret-engine-words" in answer.exchange.response


def test_an_sdk_call_is_kept_as_an_attempt_by_sha256(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": CHAT_OK}
    kept: list[tuple[Attempt, bytes, bytes]] = []

    class Sink:
        def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None:
            kept.append((attempt, request, response))

    attempt = record_sdk_attempt(Sink(), chat(url))
    ((same, request, response),) = kept
    assert same is attempt and attempt.ok and attempt.label == "sdk-chat" and attempt.status_code == 200
    assert attempt.response_sha256 == hashlib.sha256(response).hexdigest() and json.loads(response) == CHAT_OK
    assert attempt.request_sha256 == hashlib.sha256(request).hexdigest() and json.loads(request)["model"] == "m"


def sdk_gate_run(url: str, tmp_path: Path, *, strict: bool | None) -> tuple[Any, GateRecorder]:
    tiny = load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")
    gates = {**tiny.gates, "openai_sdk": {"strict": strict}} if strict is not None else tiny.gates
    recorder = GateRecorder(GateRecord(nodeid="t::sdk", gate="openai_sdk", title="sdk"), tmp_path)
    server = ServerHandle(base_url=url, served_model_name="m", launcher_kind="external")
    return openai_sdk_gate(server, dataclasses.replace(tiny, gates=gates), recorder), recorder


def conforming(script: Scripted, tool: str) -> None:
    chunks = json.loads(json.dumps(TOOL_CHUNKS))
    chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] = tool
    script.bodies = {"/v1/chat/completions": CHAT_OK, "/v1/chat/completions:stream": chunks,
                     "/v1/responses": RESPONSE_OK}


@pytest.mark.parametrize("strict", [None, True])
def test_the_gate_passes_conforming_answers_strict_or_not(server: tuple[str, Scripted], tmp_path: Path,
                                                          strict: bool | None) -> None:
    url, script = server
    conforming(script, shipped_tool_fixtures()[0].name)
    verdict, recorder = sdk_gate_run(url, tmp_path, strict=strict)
    assert verdict.passed, verdict.failure
    m = recorder.record.measurements
    assert (m["strict"], m["strict_findings"], m["findings"]) == (strict is True, 0, [])
    assert [a.label for a in recorder.record.attempts] == ["sdk-chat", "sdk-streamed-tool-call", "sdk-responses"]


def test_the_gate_holds_a_finding_against_the_server_only_when_strict(server: tuple[str, Scripted],
                                                                      tmp_path: Path) -> None:
    url, script = server
    conforming(script, shipped_tool_fixtures()[0].name)
    usage = {**RESPONSE_OK["usage"], "input_tokens_details": {"cached_tokens": 0}}
    script.bodies["/v1/responses"] = {**RESPONSE_OK, "usage": usage}
    lenient, recorder = sdk_gate_run(url, tmp_path / "lenient", strict=None)
    assert lenient.passed, lenient.failure
    assert recorder.record.measurements["findings"][0]["path"] == "usage.input_tokens_details.cache_write_tokens"
    strict, _ = sdk_gate_run(url, tmp_path / "strict", strict=True)
    assert strict.failure == (f"strict validation (gates.openai_sdk.strict: true): 1 finding(s): responses: "
                              f"usage.input_tokens_details.cache_write_tokens is missing (openai {sdk_version()}'s "
                              "Response)")


PROSE_CHUNKS = [
    {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "It is sunny."},
                           "finish_reason": None}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]


def declared_sdk_gate_run(url: str, tmp_path: Path) -> tuple[Any, GateRecorder]:
    tiny = load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")
    recipe = dataclasses.replace(tiny, gates={**tiny.gates, "openai_sdk": {"not_applicable": "no tools"}})
    recorder = GateRecorder(GateRecord(nodeid="t::sdk", gate="openai_sdk", title="sdk"), tmp_path)
    server = ServerHandle(base_url=url, served_model_name="m", launcher_kind="external")
    return openai_sdk_gate(server, recipe, recorder), recorder


def test_a_declared_streamed_tool_call_is_excused_only_when_the_model_made_none(server: tuple[str, Scripted],
                                                                               tmp_path: Path) -> None:
    """The declaration covers the model's missing call; a stream the SDK cannot decode is the server's."""
    url, script = server
    conforming(script, shipped_tool_fixtures()[0].name)
    script.bodies["/v1/chat/completions:stream"] = PROSE_CHUNKS
    excused, _ = declared_sdk_gate_run(url, tmp_path / "prose")
    assert excused.skip_reason is not None and "no chunk named the tool call's function" in excused.skip_reason
    script.bodies["/v1/chat/completions:stream"] = [TOOL_CHUNKS[0], "{\"choices\": [", TOOL_CHUNKS[2]]
    broken, recorder = declared_sdk_gate_run(url, tmp_path / "broken")
    assert broken.skip_reason is None, f"a stream the SDK cannot decode was excused: {broken.skip_reason}"
    assert broken.failure is not None and "the SDK could not decode the answer (not JSON)" in broken.failure
    assert recorder.record.failure_kind == "server_error"


def test_each_sdk_failure_says_whose_it_is(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions:stream": PROSE_CHUNKS}
    assert stream(url).failure_kind == "model_behaviour"
    script.status = 500
    script.bodies = {"/v1/chat/completions": {"error": {"message": "secret-engine-words"}}}
    assert chat(url).failure_kind == "server_error"
    assert sdk_chat(sdk_client("http://127.0.0.1:9", None, timeout_s=2), "m", "hi", max_tokens=1).failure_kind \
        == "transport"
