"""The real client: what users' applications see through the official ``openai`` SDK.

The gates' own client (``client.py``) talks raw HTTP, so it can time every byte and keep the
evidence; but an application talks through the SDK, which must *parse* what the server sends
into its typed models. A server can answer with bytes that the raw path accepts and the SDK
rejects (a missing required field, a wrong type, a malformed stream chunk). These calls use
the SDK with strict response validation, no retries, and turn any parse failure into
``SdkParseError`` naming the call and what the SDK said.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.errors import SdkParseError


@dataclass
class SdkResult:
    """One SDK call: what it returned, in the SDK's own types, flattened for the record."""

    label: str
    seconds: float
    text: str = ""
    finish_reason: str | None = None
    tool_name: str | None = None
    tool_arguments: str | None = None
    chunks: int = 0
    details: dict[str, Any] = field(default_factory=dict)


def sdk_client(base_url: str, api_key: str | None, *, timeout_s: float) -> Any:
    """An ``openai.OpenAI`` client on the server's /v1, strict about response shapes, no retries."""
    import openai

    return openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key or "EMPTY", timeout=timeout_s,
                         max_retries=0, _strict_response_validation=True)


def _guard(label: str) -> Any:
    """A context manager turning SDK errors into SdkParseError."""
    import contextlib

    import openai
    import pydantic

    @contextlib.contextmanager
    def wrapped() -> Any:
        try:
            yield
        except openai.APIResponseValidationError as exc:
            raise SdkParseError(f"{label}: the openai SDK could not validate the response: {exc}") from exc
        except (pydantic.ValidationError, json.JSONDecodeError, TypeError, KeyError) as exc:
            raise SdkParseError(f"{label}: the openai SDK could not parse the response: "
                                f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        except openai.APIStatusError as exc:
            raise SdkParseError(f"{label}: HTTP {exc.status_code} through the openai SDK: {str(exc)[:300]}") from exc
        except openai.APIError as exc:
            raise SdkParseError(f"{label}: the openai SDK failed: {type(exc).__name__}: {str(exc)[:300]}") from exc
    return wrapped()


def sdk_chat(client: Any, model: str, prompt: str, *, max_tokens: int) -> SdkResult:
    """A plain chat completion through ``client.chat.completions.create``."""
    started = time.monotonic()
    with _guard("chat"):
        completion = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                    max_tokens=max_tokens, temperature=0)
        choice = completion.choices[0]
        return SdkResult("chat", time.monotonic() - started, text=choice.message.content or "",
                         finish_reason=choice.finish_reason,
                         details={"completion_tokens": completion.usage.completion_tokens if completion.usage else None})


def sdk_stream_tool_call(client: Any, model: str, prompt: str, tools: list[dict[str, Any]], *, tool_choice: Any,
                         max_tokens: int) -> SdkResult:
    """A streamed tool call: the SDK parses every chunk; the deltas are joined into one call."""
    started = time.monotonic()
    name: str | None = None
    arguments: list[str] = []
    finish: str | None = None
    chunks = 0
    with _guard("streamed tool call"):
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                tools=tools, tool_choice=tool_choice, max_tokens=max_tokens,
                                                temperature=0, stream=True)
        for chunk in stream:
            chunks += 1
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for call in choice.delta.tool_calls or []:
                    if call.function is not None:
                        name = call.function.name or name
                        arguments.append(call.function.arguments or "")
    return SdkResult("streamed tool call", time.monotonic() - started, finish_reason=finish, tool_name=name,
                     tool_arguments="".join(arguments), chunks=chunks)


def sdk_responses(client: Any, model: str, prompt: str, *, max_output_tokens: int,
                  reasoning_effort: str | None) -> SdkResult:
    """A Responses API answer through ``client.responses.create`` (``output_text`` is the SDK's)."""
    started = time.monotonic()
    extra: dict[str, Any] = {"reasoning": {"effort": reasoning_effort}} if reasoning_effort else {}
    with _guard("responses"):
        response = client.responses.create(model=model, input=prompt, max_output_tokens=max_output_tokens,
                                           temperature=0, **extra)
        return SdkResult("responses", time.monotonic() - started, text=response.output_text or "",
                         details={"status": response.status})

__all__ = ["SdkResult", "sdk_chat", "sdk_client", "sdk_responses", "sdk_stream_tool_call"]
