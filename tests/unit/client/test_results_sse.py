"""The SSE line splitter and chunk parser, made cheaper when the streaming client was rebuilt
(docs/PERFORMANCE.md, "The streaming client, rebuilt"), against their previous code.

The previous implementations are kept below, verbatim, as the reference: the new ones must
give the same lines for every way a body can be cut into reads, and the same StreamResult
(content, usage, TTFTs, violations, error event) for every stream, including broken ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_vllmqual.client import results as results_module
from pytest_vllmqual.client.results import (
    StreamBody,
    StreamResult,
    _consume_sse_line,
    _merge_tool_delta,
    stream_error_event,
)
from pytest_vllmqual.records import Attempt


def reference_iter_lines(pieces: list[bytes], raw: bytearray) -> Iterator[str]:
    """_iter_lines before the streaming client was rebuilt."""
    buffer = b""
    for chunk in pieces:
        raw += chunk
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode(errors="replace").rstrip("\r")
    if buffer:
        yield buffer.decode(errors="replace")


def reference_consume_sse_line(line: str, result: StreamResult, started: float) -> None:
    """_consume_sse_line before the streaming client was rebuilt."""
    if not line.startswith("data:"):
        return
    payload = line[5:].strip()
    if payload == "[DONE]":
        result.saw_done = True
        return
    if result.saw_done:
        result.violations.append("data after the [DONE] terminator")
        return
    try:
        chunk = json.loads(payload)
    except ValueError:
        result.violations.append(f"unparseable SSE data: {payload[:80]!r}")
        return
    result.chunks += 1
    error = stream_error_event(chunk)
    if error is not None:
        result.stream_error = error
        return
    if chunk.get("usage") and not chunk.get("choices"):
        result.usage = chunk["usage"]
        return
    if chunk.get("usage"):
        result.usage = chunk["usage"]
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        now = time.perf_counter() - started
        content = delta.get("content")
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        tool_deltas = delta.get("tool_calls") or []
        if (content or reasoning or tool_deltas) and result.ttft_s is None:
            result.ttft_s = now
        if content:
            if result.ttft_content_s is None:
                result.ttft_content_s = now
            result.content += content
        if reasoning:
            result.reasoning += reasoning
        for tool_delta in tool_deltas:
            _merge_tool_delta(result, tool_delta)
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


def data(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}"


def choice(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
STREAMS: dict[str, list[str]] = {
    "content": [data(choice({"role": "assistant", "content": ""})), data(choice({"content": "Hé"})),
                data(choice({"content": " there"}, "stop")), data({"choices": [], "usage": USAGE}), "data: [DONE]"],
    "reasoning then content": [data(choice({"reasoning": "think"})), data(choice({"reasoning_content": "more"})),
                               data(choice({"content": "answer"}, "stop")), data({"choices": [], "usage": USAGE}),
                               "data: [DONE]"],
    "tool calls": [data(choice({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                "function": {"name": "f", "arguments": ""}}]})),
                   data(choice({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]})),
                   data(choice({"tool_calls": [{"index": 0, "id": "c2", "function": {"arguments": "1}"}}]})),
                   data(choice({"tool_calls": [{"index": 1, "function": {"arguments": "x"}}]})),
                   data(choice({"tool_calls": [{"function": {}}]}, "tool_calls")), "data: [DONE]"],
    "usage beside choices, two choices": [data({"choices": [{"index": 0, "delta": {"content": "a"}},
                                                            {"index": 1, "delta": {"content": "b"}}],
                                                "usage": USAGE}), "data: [DONE]"],
    "broken": ["data: {not json}", "data:", "data: {} trailing", "data:   {\"choices\": []}  ", ": comment",
               "event: message", "database: x", "data: [DONE]", data(choice({"content": "late"}))],
    "error event": [data(choice({"content": "a"})),
                    data({"error": {"message": "EngineCore encountered an issue", "type": "InternalServerError",
                                    "code": 500}}),
                    data({"object": "error", "message": "old style", "type": "x", "code": 400}), "data: [DONE]"],
}


def fields(result: StreamResult) -> dict[str, Any]:
    """What the reference parser fills (``last_output_s`` came later: ``last_output_line``)."""
    return {k: v for k, v in vars(result).items() if k not in ("attempt", "last_output_s")}


def last_output_line(lines: list[str]) -> float | None:
    """The number of the last line before [DONE] whose chunk carried output (content, reasoning, tool call)."""
    last = None
    for number, line in enumerate(lines):
        if line == "data: [DONE]":
            break
        try:
            chunk = json.loads(line[5:]) if line.startswith("data:") else None
        except ValueError:
            continue
        deltas = [c.get("delta") or {} for c in chunk.get("choices") or []] if isinstance(chunk, dict) else []
        if any(d.get(k) for d in deltas for k in ("content", "reasoning", "reasoning_content", "tool_calls")):
            last = float(number)
    return last


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_parser_gives_what_it_gave_before(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(results_module, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(time, "perf_counter", lambda: clock.now)
    new, old = (StreamResult(Attempt(kind="stream", label="x", ok=False), 200) for _ in range(2))
    for number, line in enumerate(STREAMS[name]):
        clock.now = 10.0 + number  # each line at its own time: a TTFT names the line it was taken at
        _consume_sse_line(line, new, 10.0)
        reference_consume_sse_line(line, old, 10.0)
    assert fields(new) == fields(old)
    assert new.last_output_s == last_output_line(STREAMS[name])


def body_variants() -> dict[str, bytes]:
    lines = [line for stream in STREAMS.values() for line in stream]
    lf = "".join(f"{line}\n\n" for line in lines).encode()
    return {
        "lf": lf,
        "crlf": "".join(f"{line}\r\n\r\n" for line in lines).encode(),
        "unterminated data": lf + b"data: {\"choices\": []}",
        "unterminated other": lf + b"event: x",
        "invalid utf-8": b"data: {\"choices\": [{\"delta\": {\"content\": \"\xff\xfe\"}}]}\n\ndata: [DONE]\n\n",
    }


@pytest.mark.parametrize("name", list(body_variants()))
def test_the_line_splitter_gives_the_same_data_lines_for_every_cut(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = body_variants()[name]
    expected_raw = bytearray()
    expected = [line for line in reference_iter_lines([body], expected_raw) if line.startswith("data:")]
    consumed: list[str] = []
    monkeypatch.setattr(results_module, "_consume_sse_line", lambda line, result, started: consumed.append(line))
    cuts: list[list[bytes]] = [[body], [body[i:i + 1] for i in range(len(body))]]
    cuts += [[body[:i], body[i:j], body[j:]] for i in range(0, len(body), 7) for j in (i + 1, i + 40, len(body))]
    for pieces in cuts:
        consumed.clear()
        stream = StreamBody(StreamResult(Attempt(kind="stream", label="x", ok=False), None), 0.0)
        sink = stream.on_head(200)
        for piece in pieces:
            sink(piece)
        stream.finish()
        assert consumed == expected and stream.raw == body == expected_raw
