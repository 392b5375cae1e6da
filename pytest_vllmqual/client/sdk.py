"""The real client: what users' applications see through the official ``openai`` SDK.

The gates' own client (``qual_client``) talks raw HTTP, so it can time every byte and keep the
evidence; an application talks through the SDK. The SDK as shipped parses answers
*leniently*: a field it does not find, or finds with another type, is kept as it came and
breaks only the application that reads it. So these calls use the SDK as shipped (default
parsing, no retries) and then read what an application reads: the chat text, the finish
reason, the usage counts, the streamed tool call's name and arguments, the Responses API's
``output_text`` and status. A read that fails or gives the wrong kind of value is the call's
``failure``, said once, in schema words (a path and a kind of value, never the server's text).

Every raw answer is also validated strictly against the SDK's own model (what
``_strict_response_validation=True`` would enforce), each deviation a named
:class:`~pytest_vllmqual.client.sdk_findings.SdkFinding`. Whether a finding fails the gate is
the recipe's choice (``gates.openai_sdk.strict``), not this module's.
"""

from __future__ import annotations

import json
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.hashing import sha256_hex
from pytest_vllmqual.records import Attempt, FailureKind

from .qual_client import AttemptSink
from .sdk_findings import SdkFinding, json_kind, render_path, strict_findings

__all__ = ["SdkExchange", "SdkResult", "record_sdk_attempt", "sdk_chat", "sdk_client", "sdk_responses",
           "sdk_stream_tool_call", "sdk_version"]


@dataclass
class SdkExchange:
    """The bytes of one SDK call (kept privately by the gate, named by SHA-256 publicly)."""

    request: bytes = b""
    response: bytes = b""
    status_code: int | None = None


@dataclass
class SdkResult:
    """One SDK call: what an application read from it, what broke, and the strict findings."""

    label: str
    seconds: float = 0.0
    text: str = ""
    finish_reason: str | None = None
    status: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    tool_name: str | None = None
    tool_arguments: str | None = None
    chunks: int = 0
    failure: str | None = None
    """What an application could not read or use, in schema words; None when it got everything."""
    failure_kind: FailureKind | None = None
    """Whose failure it is: the model's only where the answer came back whole and lacked the call."""
    findings: list[SdkFinding] = field(default_factory=list)
    exchange: SdkExchange = field(default_factory=SdkExchange)


class _Unusable(Exception):
    """A read an application makes failed, or gave the wrong kind of value (schema words only)."""

    kind = FailureKind.SERVER_ERROR


class _NoCall(_Unusable):
    """The stream came back whole, and the model made no call the SDK can use."""

    kind = FailureKind.MODEL_BEHAVIOUR


class _Broken(_Unusable):
    """The connection broke before the answer was complete."""

    kind = FailureKind.TRANSPORT


def sdk_version() -> str:
    import openai

    return str(openai.__version__)


def sdk_client(base_url: str, api_key: str | None, *, timeout_s: float) -> Any:
    """An ``openai.OpenAI`` client on the server's /v1 as applications build it: default
    (lenient) response parsing, and no retries, so every answer is the server's first."""
    import openai

    return openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key or "EMPTY", timeout=timeout_s,
                         max_retries=0)


# -- reading as an application reads ----------------------------------------------------------


def _article(kind: str) -> str:
    return kind if kind in ("null", "missing") else ("an " if kind[:1] in "aeiou" else "a ") + kind


def _kind(value: Any) -> str:
    import pydantic

    return "object" if isinstance(value, pydantic.BaseModel) else json_kind(value)


def _read(root: Any, path: tuple[str | int, ...], where: tuple[str | int, ...] = ()) -> Any:
    """``root.path`` read attribute by attribute as application code does; what broke, if it did."""
    import pydantic

    value, done = root, where
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list):
                raise _Unusable(f"{render_path(done)} is {_article(_kind(value))} where the SDK needs an array")
            if len(value) <= step:
                raise _Unusable(f"{render_path(done)} is empty")
            value = value[step]
        elif isinstance(value, pydantic.BaseModel):
            model_field = type(value).model_fields.get(step)
            absent = step not in value.model_fields_set
            try:
                value = getattr(value, step)
            except AttributeError:
                raise _Unusable(f"{render_path((*done, step))} is missing") from None
            # Lenient parsing fills an absent field with its default (None for a required one).
            if absent and value is None and (model_field is None or model_field.is_required() or step != path[-1]):
                raise _Unusable(f"{render_path((*done, step))} is missing")
        else:
            raise _Unusable(f"{render_path(done)} is {_article(_kind(value))} where the SDK needs an object")
        done = (*done, step)
    return value


def _literal_values(annotation: Any) -> tuple[Any, ...]:
    """Every value a ``Literal`` inside an SDK field's annotation allows (through Optional, aliases)."""
    annotation = getattr(annotation, "__value__", annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    return tuple(v for arg in typing.get_args(annotation) for v in _literal_values(arg))


def _field_values(model_cls: Any, name: str) -> tuple[Any, ...]:
    return _literal_values(model_cls.model_fields[name].annotation)


def _one_of(value: Any, allowed: tuple[Any, ...], path: str) -> str:
    if value is None:
        raise _Unusable(f"{path} is null")
    if value not in allowed:
        raise _Unusable(f"{path} is {_article(_kind(value))} that is none of the SDK's values "
                        f"({', '.join(map(str, allowed))})")
    return str(value)


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _Unusable(f"{path} is {_article(_kind(value))}, not a string")
    if not value.strip():
        raise _Unusable(f"{path} is empty")
    return value


def _counts(usage: Any, names: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        value = _read(usage, (name,), ("usage",))
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Unusable(f"usage.{name} is {_article(_kind(value))}, not an integer")
        counts[name] = value
    return counts


# -- the calls ------------------------------------------------------------------------------


def _keep(result: SdkResult, http_response: Any) -> None:
    """The call's request and response bytes, for the gate's private evidence."""
    request = getattr(http_response, "request", None)
    try:
        result.exchange.request = bytes(request.content) if request is not None else b""
    except Exception:  # a request body that was streamed, not buffered
        result.exchange.request = b""
    result.exchange.status_code = http_response.status_code
    try:
        result.exchange.response = http_response.read()
    except Exception:  # httpx's or httpx2's transport error, as the SDK's own stream would meet it
        raise _Broken("the connection broke before the answer was complete") from None


def _call(result: SdkResult, body: Callable[[], None]) -> SdkResult:
    """Run one SDK call and its reads; what broke becomes ``result.failure``, in one sentence."""
    import openai
    import pydantic

    started = time.monotonic()
    try:
        body()
    except _Unusable as exc:
        result.failure, result.failure_kind = str(exc), exc.kind
    except openai.APIStatusError as exc:
        try:
            _keep(result, exc.response)
        except _Unusable:
            pass
        result.failure = f"the server answered HTTP {exc.status_code}"
    except openai.APITimeoutError:
        result.failure, result.failure_kind = "the request timed out", FailureKind.TRANSPORT
    except openai.APIConnectionError:
        result.failure = "the connection failed before the answer was complete"
        result.failure_kind = FailureKind.TRANSPORT
    except openai.APIError:
        result.failure = "the answer carried an error event"
    except (pydantic.ValidationError, AttributeError, TypeError, KeyError, IndexError, RuntimeError) as exc:
        result.failure = f"the SDK could not build its types from the answer ({type(exc).__name__})"
    except ValueError as exc:  # json.JSONDecodeError included: the SDK could not decode the answer
        kind = "not JSON" if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        result.failure = f"the SDK could not decode the answer ({kind})"
    if result.failure is not None and result.failure_kind is None:
        result.failure_kind = FailureKind.SERVER_ERROR
    result.seconds = time.monotonic() - started
    result.failure = f"{result.label}: {result.failure}" if result.failure else None
    return result


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def sdk_chat(client: Any, model: str, prompt: str, *, max_tokens: int) -> SdkResult:
    """A plain chat completion through ``client.chat.completions.create``."""
    from openai.types.chat import ChatCompletion
    from openai.types.chat.chat_completion import Choice

    result = SdkResult("chat")

    def body() -> None:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0)
        _keep(result, raw.http_response)
        data = _json(result.exchange.response)
        if data is not None:
            result.findings = strict_findings(ChatCompletion, data, call="chat", sdk_version=sdk_version())
        completion = raw.parse()
        choice = _read(completion, ("choices", 0))
        result.text = _text(_read(choice, ("message", "content"), ("choices", 0)), "choices[0].message.content")
        result.finish_reason = _one_of(_read(choice, ("finish_reason",), ("choices", 0)),
                                       _field_values(Choice, "finish_reason"), "choices[0].finish_reason")
        result.usage = _counts(_read(completion, ("usage",)), ("prompt_tokens", "completion_tokens", "total_tokens"))

    return _call(result, body)


def _sse_payloads(body: bytes) -> list[Any]:
    """The JSON payloads of an SSE body (``[DONE]`` and lines that are not JSON left out)."""
    payloads, data = [], []
    for line in [*body.decode("utf-8", "replace").splitlines(), ""]:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line.strip() and data:
            text, data = "\n".join(data), []
            if text != "[DONE]" and (parsed := _json(text.encode())) is not None:
                payloads.append(parsed)
    return payloads


def _merge_findings(findings: list[SdkFinding]) -> list[SdkFinding]:
    """One finding per path and kind, counting the chunks that had it."""
    merged: dict[tuple[str, ...], SdkFinding] = {}
    for finding in findings:
        seen = merged.get(finding.key)
        merged[finding.key] = finding if seen is None else SdkFinding(
            **{**seen.to_dict(), "occurrences": seen.occurrences + finding.occurrences})
    return list(merged.values())


def _stream_findings(body: bytes) -> list[SdkFinding]:
    from openai.types.chat import ChatCompletionChunk

    version = sdk_version()
    return _merge_findings([f for payload in _sse_payloads(body)
                            for f in strict_findings(ChatCompletionChunk, payload, call="streamed tool call",
                                                     sdk_version=version)])


def _read_chunk(result: SdkResult, chunk: Any, number: int, arguments: list[str]) -> None:
    """One chunk as an application reads it: finish reasons and the tool call's deltas."""
    where: tuple[str | int, ...] = (f"chunk {number}: choices",)
    choices = _read(chunk, ("choices",))
    if not isinstance(choices, list):
        raise _Unusable(f"chunk {number}: choices is {_article(_kind(choices))} where the SDK needs an array")
    for index, choice in enumerate(choices):
        here = (*where, index)
        result.finish_reason = _read(choice, ("finish_reason",), here) or result.finish_reason
        calls = _read(choice, ("delta", "tool_calls"), here) or []
        for position, call in enumerate(calls if isinstance(calls, list) else [calls]):
            function = _read(call, ("function",), (*here, "delta", "tool_calls", position))
            if function is None:
                continue
            name = _read(function, ("name",), (*here, "delta", "tool_calls", position, "function"))
            result.tool_name = name or result.tool_name
            piece = _read(function, ("arguments",), (*here, "delta", "tool_calls", position, "function"))
            if piece is not None and not isinstance(piece, str):
                raise _Unusable(f"chunk {number}: a tool call's arguments are {_article(_kind(piece))}, not a string")
            arguments.append(piece or "")


def sdk_stream_tool_call(client: Any, model: str, prompt: str, tools: list[dict[str, Any]], *, tool_choice: Any,
                         max_tokens: int) -> SdkResult:
    """A streamed tool call: the SDK parses every chunk; the deltas are joined into one call,
    which must have a name and JSON arguments, and the stream a finish reason the SDK knows."""
    from openai.types.chat.chat_completion_chunk import Choice

    result = SdkResult("streamed tool call")

    def body() -> None:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": prompt}], tools=tools, tool_choice=tool_choice,
            max_tokens=max_tokens, temperature=0, stream=True)
        _keep(result, raw.http_response)  # the whole stream, read once; the SDK then parses these bytes
        result.findings = _stream_findings(result.exchange.response)
        arguments: list[str] = []
        for chunk in raw.parse():
            result.chunks += 1
            _read_chunk(result, chunk, result.chunks, arguments)
        result.tool_arguments = "".join(arguments)
        if not (isinstance(result.tool_name, str) and result.tool_name):
            if not result.chunks:
                raise _Unusable("the stream was empty")
            raise _NoCall("no chunk named the tool call's function")
        try:
            json.loads(result.tool_arguments)
        except ValueError:
            raise _NoCall(f"the tool call's arguments are not JSON ({len(result.tool_arguments)} "
                            "characters)") from None
        if result.finish_reason is None:
            raise _Unusable("no chunk carried a finish_reason")
        _one_of(result.finish_reason, _field_values(Choice, "finish_reason"), "finish_reason")

    return _call(result, body)


def sdk_responses(client: Any, model: str, prompt: str, *, max_output_tokens: int,
                  reasoning_effort: str | None) -> SdkResult:
    """A Responses API answer through ``client.responses.create`` (``output_text`` is the SDK's)."""
    from openai.types.responses import Response

    result = SdkResult("responses")
    extra: dict[str, Any] = {"reasoning": {"effort": reasoning_effort}} if reasoning_effort else {}

    def body() -> None:
        raw = client.responses.with_raw_response.create(model=model, input=prompt,
                                                        max_output_tokens=max_output_tokens, temperature=0, **extra)
        _keep(result, raw.http_response)
        data = _json(result.exchange.response)
        if data is not None:
            result.findings = strict_findings(Response, data, call="responses", sdk_version=sdk_version())
        response = raw.parse()
        output = _read(response, ("output",))
        if not isinstance(output, list):
            raise _Unusable(f"output is {_article(_kind(output))} where the SDK needs an array")
        try:
            text = response.output_text
        except (AttributeError, TypeError):
            raise _Unusable("output_text cannot be read: an output item is not what the SDK needs") from None
        result.text = _text(text, "output_text")
        result.status = _one_of(_read(response, ("status",)), _field_values(Response, "status"), "status")
        result.usage = _counts(_read(response, ("usage",)), ("input_tokens", "output_tokens", "total_tokens"))

    return _call(result, body)


def record_sdk_attempt(sink: AttemptSink, result: SdkResult) -> Attempt:
    """Keep one SDK call as a gate attempt: its bytes privately, their SHA-256 in the report."""
    exchange = result.exchange
    attempt = Attempt(kind="sdk", label=f"sdk-{result.label.replace(' ', '-')}", ok=result.failure is None,
                      status_code=exchange.status_code, latency_s=round(result.seconds, 4),
                      usage=dict(result.usage) or None,
                      request_sha256=sha256_hex(exchange.request),
                      response_sha256=sha256_hex(exchange.response),
                      error_kind=None if result.failure is None else "sdk_read")
    sink.record_attempt(attempt, exchange.request, exchange.response)
    return attempt
