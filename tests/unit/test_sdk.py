"""The openai-SDK path fails when the SDK cannot parse what the server sent.

A real vLLM always sends answers its own OpenAI models produced, so it cannot be made to send
an unparseable one on demand: these tests use a small HTTP server in this process that answers
each route with a body we choose. The same server answering well-formed bodies proves that the
failures come from the bodies, not from the harness.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_vllmqual.client.sdk import sdk_chat, sdk_client, sdk_responses, sdk_stream_tool_call
from pytest_vllmqual.errors import SdkParseError

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
               "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


class Scripted:
    """What the server answers per path: a JSON body, or SSE lines for a stream."""

    def __init__(self) -> None:
        self.bodies: dict[str, Any] = {}


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
            self.send_response(200)
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


def test_well_formed_answers_parse(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions": CHAT_OK, "/v1/chat/completions:stream": TOOL_CHUNKS,
                     "/v1/responses": RESPONSE_OK}
    assert sdk_chat(client(url), "m", "Say cloud.", max_tokens=4).text == "cloud"
    tool = sdk_stream_tool_call(client(url), "m", "weather?", TOOLS, tool_choice="auto", max_tokens=16)
    assert (tool.tool_name, json.loads(tool.tool_arguments or "")) == ("get_weather", {"city": "Paris"})
    assert tool.finish_reason == "tool_calls" and tool.chunks == 3
    answer = sdk_responses(client(url), "m", "Say cloud.", max_output_tokens=8, reasoning_effort="high")
    assert (answer.text, answer.details["status"]) == ("cloud", "completed")


def test_chat_missing_required_field_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    broken = {**CHAT_OK, "choices": [{"index": 0, "message": {"role": "assistant", "content": "cloud"}}]}
    script.bodies = {"/v1/chat/completions": broken}  # finish_reason is required in the SDK's Choice
    with pytest.raises(SdkParseError, match="chat: the openai SDK could not validate"):
        sdk_chat(client(url), "m", "Say cloud.", max_tokens=4)


def test_stream_chunk_that_is_not_json_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/chat/completions:stream": [TOOL_CHUNKS[0], "{\"choices\": [", TOOL_CHUNKS[2]]}
    with pytest.raises(SdkParseError, match="streamed tool call"):
        sdk_stream_tool_call(client(url), "m", "weather?", TOOLS, tool_choice="auto", max_tokens=16)


def test_responses_with_wrong_types_fails(server: tuple[str, Scripted]) -> None:
    url, script = server
    script.bodies = {"/v1/responses": {**RESPONSE_OK, "output": "cloud"}}  # output must be a list of items
    with pytest.raises(SdkParseError, match="responses: the openai SDK could not validate"):
        sdk_responses(client(url), "m", "Say cloud.", max_output_tokens=8, reasoning_effort=None)
