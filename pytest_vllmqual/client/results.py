"""Typed results of the OpenAI-API calls, and the SSE parse that fills a streamed one.

``ChatResult`` is a non-streamed response, ``StreamResult`` a streamed chat completion whose
``data:`` lines ``StreamBody`` feeds to the SSE parse as they arrive (TTFT is taken when a line
is parsed), with tool-call deltas merged and every broken SSE rule recorded. The client builds
these; gates, checks and the ladder read them instead of raw response JSON.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.records import Attempt

from .http1 import BodySink

__all__ = ["ChatResult", "ResponsesResult", "StreamBody", "StreamResult", "StreamedToolCall", "decode_tok_s",
           "percentile", "stream_error_event", "tpot_s"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation between the two nearest ranks (numpy's
    default, which ``vllm bench serve`` uses); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def tpot_s(completion_tokens: int | None, ttft_s: float | None, last_output_s: float | None) -> float | None:
    """Time per output token: ``(last_output_s - ttft_s) / (completion_tokens - 1)``.

    The one definition of TPOT and decode rate in the package, vLLM's own (``vllm bench serve``
    and the server's ``vllm:request_time_per_output_token_seconds``): the steps after the first
    token, ending when the last token arrives. The usage chunk and ``[DONE]`` that follow it carry
    no token (10-15 ms on an H200, a third of a 32-token request's decode there). ``last_output_s``
    is the time to the last streamed delta carrying output; None for fewer than two tokens or a
    missing time.
    """
    if not completion_tokens or completion_tokens < 2 or ttft_s is None or last_output_s is None:
        return None
    return (last_output_s - ttft_s) / (completion_tokens - 1)


def decode_tok_s(completion_tokens: int | None, ttft_s: float | None, last_output_s: float | None) -> float | None:
    """Decode rate, 1 / TPOT (``tpot_s``); None also where every token arrived at once (no time to divide by)."""
    tpot = tpot_s(completion_tokens, ttft_s, last_output_s)
    return 1.0 / tpot if tpot is not None and tpot > 0 else None


@dataclass
class ChatResult:
    """A non-streamed response (chat, responses, or any JSON endpoint)."""

    attempt: Attempt
    status_code: int | None
    body: dict[str, Any] | None
    text: str

    def __repr__(self) -> str:
        """No server text: a failed assertion prints this repr into junit and the terminal."""
        return f"ChatResult(status_code={self.status_code}, attempt={self.attempt.label!r})"

    @property
    def ok(self) -> bool:
        return self.attempt.ok

    @property
    def choice(self) -> dict[str, Any]:
        choices = (self.body or {}).get("choices") or [{}]
        first: dict[str, Any] = choices[0]
        return first

    @property
    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = self.choice.get("message") or {}
        return message

    @property
    def finish_reason(self) -> str | None:
        return self.choice.get("finish_reason")

    @property
    def content(self) -> str:
        return str(self.message.get("content") or "")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = self.message.get("tool_calls") or []
        return calls

    @property
    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = (self.body or {}).get("usage") or {}
        return usage

    def usage_count(self, key: str) -> int | None:
        """An integer ``usage`` field (``prompt_tokens``, ``input_tokens``, …), None when absent."""
        value = self.usage.get(key)
        return value if isinstance(value, int) else None

    @property
    def prompt_tokens(self) -> int | None:
        """The API-reported prompt size (``usage.prompt_tokens``)."""
        return self.usage_count("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return self.usage_count("completion_tokens")


@dataclass(repr=False)
class ResponsesResult(ChatResult):
    """A Responses API answer (``/v1/responses``), read through typed accessors, not raw JSON."""

    def __repr__(self) -> str:
        """No server text: a failed assertion prints this repr into junit and the terminal."""
        return f"ResponsesResult(status_code={self.status_code}, attempt={self.attempt.label!r})"

    @property
    def status(self) -> Any:
        """The response's own ``status`` ("completed", "incomplete", …), None when absent."""
        return (self.body or {}).get("status")

    @property
    def output(self) -> list[dict[str, Any]]:
        """The output items, in order (messages, reasoning, function calls)."""
        items = (self.body or {}).get("output")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    @property
    def output_types(self) -> list[Any]:
        return [item.get("type") for item in self.output]

    @property
    def output_text(self) -> str:
        """Every ``output_text`` part of the message items, joined."""
        return "".join(part.get("text", "") for item in self.output if item.get("type") == "message"
                       for part in item.get("content", []) if part.get("type") == "output_text")

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        """The ``function_call`` output items, as the server sent them (a round trip sends them back)."""
        return [item for item in self.output if item.get("type") == "function_call"]

    @property
    def input_tokens(self) -> int | None:
        return self.usage_count("input_tokens")

    @property
    def output_tokens(self) -> int | None:
        return self.usage_count("output_tokens")


@dataclass
class StreamedToolCall:
    """A tool call reassembled from stream deltas."""

    index: int
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class StreamResult:
    """A streamed chat completion: timings, reassembled output, and every broken rule."""

    attempt: Attempt
    status_code: int | None
    saw_done: bool = False
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    content: str = ""
    reasoning: str = ""
    tool_calls: list[StreamedToolCall] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    chunks: int = 0
    ttft_s: float | None = None
    ttft_content_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None
    #: An error event the server sent inside the 200 stream (vLLM does this when the engine fails
    #: mid-generation): its type, code and message, kept apart from the SSE contract violations.
    stream_error: dict[str, Any] | None = None
    #: When asked for (a list, not None): the time of every chunk that carried output, seconds
    #: from sending, for the inter-chunk latencies (ITL) of the load gate. Off by default.
    output_times: list[float] | None = None
    #: Seconds from sending to the last chunk that carried output: where decode ends (``tpot_s``).
    last_output_s: float | None = None

    def __repr__(self) -> str:
        """No server text: a failed assertion prints this repr into junit and the terminal."""
        return (f"StreamResult(status_code={self.status_code}, attempt={self.attempt.label!r}, "
                f"chunks={self.chunks}, violations={len(self.violations)})")

    @property
    def ok(self) -> bool:
        return self.attempt.ok

    def metrics(self) -> dict[str, float | int | None]:
        """This request's figures as a report states them (decode ends at the last output chunk: ``tpot_s``)."""
        prompt = (self.usage or {}).get("prompt_tokens")
        completion = (self.usage or {}).get("completion_tokens")
        prefill = prompt / self.ttft_s if prompt and self.ttft_s else None
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "ttft_s": self.ttft_s,
            "ttft_content_s": self.ttft_content_s,
            "e2e_s": self.e2e_s,
            "prefill_tok_s": prefill,
            "decode_tok_s": decode_tok_s(completion, self.ttft_s, self.last_output_s),
        }


class StreamBody:
    """Where a streamed response's body goes: the raw copy (private artifact, SHA-256), then,
    for a 200, its ``data:`` lines into ``_consume_sse_line``, one split per read.

    Other lines (the blank line ending each event, comments, ``event:`` fields) are dropped
    undecoded: ``_consume_sse_line`` ignores them.
    """

    def __init__(self, result: StreamResult, started: float) -> None:
        self.result = result
        self.started = started
        self.raw = bytearray()
        self._buffer = b""

    def on_head(self, status_code: int) -> BodySink:
        self.result.status_code = self.result.attempt.status_code = status_code
        return self.feed if status_code == 200 else self.raw.extend

    def feed(self, chunk: bytes) -> None:
        self.raw += chunk
        if b"\n" not in chunk:
            self._buffer += chunk
            return
        lines = (self._buffer + chunk if self._buffer else chunk).split(b"\n")
        self._buffer = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                _consume_sse_line(line.decode(errors="replace").rstrip("\r"), self.result, self.started)

    def finish(self) -> None:
        """The body ended: a last line without its newline still counts."""
        if self._buffer.startswith(b"data:"):
            _consume_sse_line(self._buffer.decode(errors="replace"), self.result, self.started)


#: json.loads without its wrapper: the C scanner on an already stripped payload (``loads``
#: skips JSON whitespace on both sides and rejects anything after the value; so does this).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _consume_sse_line(line: str, result: StreamResult, started: float) -> None:
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
        chunk, end = _scan_json(payload, 0)
    except (StopIteration, ValueError):
        end = -1
    if end != len(payload):
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
        content = delta.get("content")
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        tool_deltas = delta.get("tool_calls") or []
        if content or reasoning or tool_deltas:
            now = result.last_output_s = time.perf_counter() - started
            if result.ttft_s is None:
                result.ttft_s = now
            if content and result.ttft_content_s is None:
                result.ttft_content_s = now
            if result.output_times is not None:
                result.output_times.append(now)
        if content:
            result.content += content
        if reasoning:
            result.reasoning += reasoning
        for tool_delta in tool_deltas:
            _merge_tool_delta(result, tool_delta)
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


def stream_error_event(chunk: Any) -> dict[str, Any] | None:
    """The error a server put inside a 200 stream, or None for an ordinary chunk.

    vLLM sends ``{"error": {"message", "type", "code"}}`` (≥0.11) or the flat
    ``{"object": "error", "message", …}`` (older) followed by ``[DONE]`` when generation fails.
    """
    if not isinstance(chunk, dict):
        return None
    if isinstance(chunk.get("error"), dict):
        inner: dict[str, Any] = chunk["error"]
    elif chunk.get("object") == "error":
        inner = chunk
    else:
        return None
    return {"type": inner.get("type"), "code": inner.get("code"), "message": str(inner.get("message", ""))}


def _merge_tool_delta(result: StreamResult, delta: dict[str, Any]) -> None:
    """Apply one tool-call delta, recording every rule it breaks."""
    index = delta.get("index")
    if not isinstance(index, int):
        result.violations.append("tool-call delta without an integer index")
        return
    function = delta.get("function") or {}
    existing = next((c for c in result.tool_calls if c.index == index), None)
    if existing is None:
        if not delta.get("id"):
            result.violations.append(f"first delta of tool call {index} has no id")
        if not function.get("name"):
            result.violations.append(f"first delta of tool call {index} has no function name")
        existing = StreamedToolCall(index=index, id=delta.get("id"), type=delta.get("type"),
                                    name=function.get("name"))
        result.tool_calls.append(existing)
    else:
        if delta.get("id") and delta.get("id") != existing.id:
            result.violations.append(f"tool call {index} changed its id mid-stream")
        if function.get("name") and existing.name and function.get("name") != existing.name:
            result.violations.append(f"tool call {index} changed its name mid-stream")
    if function.get("arguments"):
        existing.arguments += function["arguments"]
