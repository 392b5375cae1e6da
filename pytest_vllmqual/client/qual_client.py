"""OpenAI-API calls with timing, usage and evidence, and nothing retried behind your back.

Every call becomes an ``Attempt``: status, latency, usage and the SHA-256 of the exact
request and response bytes, whose raw copies go to the private artifacts through the sink.
HTTP errors are results, not exceptions, so a gate can retain a 400 and go on. Transport
failures ask the liveness guard whether the server is gone; if it is, ``ServerGoneError``
ends the gate at once instead of each later gate waiting out its own timeout.

Streaming is parsed from the raw SSE so that the harness, not an SDK, decides what the
first token is: ``ttft_s`` is the first delta carrying output of any kind (content,
reasoning or a tool call), ``ttft_content_s`` the first visible content. The result types
and that parse live in ``results``, the socket transport of the streams in
``stream_transport``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.hashing import canonical_json, sha256_hex
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.records import Attempt

from .http1 import BodySink
from .results import ChatResult, ResponsesResult, StreamBody, StreamResult
from .stream_transport import StreamTransport, shared_ssl_context

__all__ = ["AttemptSink", "LivenessGuard", "QualClient", "http_client"]


class AttemptSink(Protocol):
    """Receives every attempt with its raw bytes (stored privately, hashed publicly)."""

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None: ...


class LivenessGuard(Protocol):
    """Knows whether the server is still usable; shared by all gates of a run."""

    def assert_usable(self) -> None:
        """Raise ServerGoneError when the server is already known dead or hung."""

    def after_failure(self, error: Exception | None, status_code: int | None, text: str,
                      request: str | None = None) -> ServerGoneError | None:
        """Decide, after a failed request (``request``: its label), whether the server is gone (and
        remember it, with the request).

        ``error`` is the transport exception, or None for an HTTP error status.
        """


def http_client(handle: ServerHandle, **kwargs: Any) -> httpx.Client:
    """An httpx client for ``handle``'s server (base URL, auth headers), on the shared SSL context."""
    return httpx.Client(base_url=handle.base_url, headers=handle.auth_headers(), verify=shared_ssl_context(),
                        **kwargs)


def _dumps(body: dict[str, Any]) -> bytes:
    return canonical_json(body).encode()


def _error_text(response_text: str) -> str:
    try:
        data = json.loads(response_text)
    except ValueError:
        return response_text[:500]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:2000]
        return str(err)[:2000]
    return response_text[:500]


class QualClient:
    """HTTP client for one server. Never retries; one call is one attempt."""

    def __init__(
        self,
        handle: ServerHandle,
        *,
        timeout_s: float,
        sink: AttemptSink | None = None,
        guard: LivenessGuard | None = None,
        retries: int = 0,
    ) -> None:
        self.handle = handle
        self.retries = retries
        self.model = handle.served_model_name
        self.timeout_s = timeout_s
        self.sink = sink
        self.guard = guard
        #: The attempt recorded last: what a caller reads when a call ends in ServerGoneError.
        self.last_attempt: Attempt | None = None
        self._http = http_client(handle, timeout=httpx.Timeout(timeout_s, connect=10.0))
        #: The streaming path's own HTTP/1.1 transport (None where httpx must be used, e.g. a proxy).
        self._stream_transport = StreamTransport.for_client(self._http, handle.auth_headers())
        self._own_http = self._http

    @property
    def http(self) -> httpx.Client:
        """The underlying client, for informational calls that are not gate attempts."""
        return self._http

    def close(self) -> None:
        self._http.close()
        if self._stream_transport is not None:
            self._stream_transport.close()

    def __enter__(self) -> QualClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _emit(self, attempt: Attempt, request: bytes, response: bytes) -> None:
        attempt.request_sha256 = sha256_hex(request)
        attempt.response_sha256 = sha256_hex(response)
        self.last_attempt = attempt
        if self.sink is not None:
            self.sink.record_attempt(attempt, request, response)

    def _transport_failure(self, attempt: Attempt, request: bytes, exc: Exception, raw: bytes = b"") -> None:
        attempt.ok = False
        attempt.error_kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
        attempt.error = f"{type(exc).__name__}: {exc}"[:500]
        gone = self.guard.after_failure(exc, None, '', attempt.label) if self.guard is not None else None
        if gone is not None:
            attempt.error_kind = gone.status
            attempt.error = f"{attempt.error}; {gone}"
        self._emit(attempt, request, raw)
        if gone is not None:
            raise gone

    # -- JSON endpoints -------------------------------------------------------------------

    def post_json(
        self, path: str, body: dict[str, Any], *, kind: str, label: str, expect_status: int = 200,
        timeout_s: float | None = None,
    ) -> ChatResult:
        """POST a JSON body. A failed attempt is retried only under the recipe's explicit
        ``requests.retries``; every attempt (``label``, ``label-retry1``, …) is recorded."""
        result = self._post_once(path, body, kind=kind, label=label, expect_status=expect_status,
                                 timeout_s=timeout_s)
        for number in range(1, self.retries + 1):
            if result.ok:
                break
            result = self._post_once(path, body, kind=kind, label=f"{label}-retry{number}",
                                     expect_status=expect_status, timeout_s=timeout_s)
        return result

    def _post_once(
        self, path: str, body: dict[str, Any], *, kind: str, label: str, expect_status: int,
        timeout_s: float | None,
    ) -> ChatResult:
        """One POST, one attempt. ``expect_status`` other than 200 marks an expected rejection."""
        if self.guard is not None:
            self.guard.assert_usable()
        request = _dumps(body)
        attempt = Attempt(kind=kind, label=label, ok=False)
        started = time.perf_counter()
        try:
            response = self._http.post(
                path, content=request, headers={"content-type": "application/json"},
                timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            attempt.latency_s = time.perf_counter() - started
            self._transport_failure(attempt, request, exc)
            return ChatResult(attempt, None, None, "")
        attempt.latency_s = time.perf_counter() - started
        attempt.status_code = response.status_code
        text = response.text
        parsed: dict[str, Any] | None = None
        try:
            loaded = response.json()
            parsed = loaded if isinstance(loaded, dict) else None
        except ValueError:
            parsed = None
        attempt.ok = response.status_code == expect_status
        if expect_status != 200:
            attempt.expected_rejection = attempt.ok
        if response.status_code != 200:
            attempt.error = _error_text(text)
            attempt.error_kind = f"http_{response.status_code}"
        if parsed is not None and isinstance(parsed.get("usage"), dict):
            attempt.usage = {k: v for k, v in parsed["usage"].items() if isinstance(v, int)}
        self._emit(attempt, request, response.content)
        self._check_server_error(attempt, response.status_code, text)
        return ChatResult(attempt, response.status_code, parsed, text)

    def _check_server_error(self, attempt: Attempt, status_code: int, text: str) -> None:
        """A 5xx may mean the engine died behind a live API server; ask the guard."""
        if status_code < 500 or self.guard is None:
            return
        gone = self.guard.after_failure(None, status_code, text, attempt.label)
        if gone is not None:
            attempt.error_kind = gone.status
            raise gone

    def chat(self, body: dict[str, Any], *, label: str, expect_status: int = 200,
             timeout_s: float | None = None) -> ChatResult:
        body = {"model": self.model, **body}
        return self.post_json("/v1/chat/completions", body, kind="chat", label=label,
                              expect_status=expect_status, timeout_s=timeout_s)

    def responses(self, body: dict[str, Any], *, label: str) -> ResponsesResult:
        body = {"model": self.model, **body}
        result = self.post_json("/v1/responses", body, kind="responses", label=label)
        return ResponsesResult(result.attempt, result.status_code, result.body, result.text)

    def tokenize_chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                      chat_template_kwargs: dict[str, Any] | None = None, label: str = "tokenize") -> ChatResult:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        return self.post_json("/tokenize", body, kind="tokenize", label=label)

    # -- streaming ------------------------------------------------------------------------

    def stream_chat(self, body: dict[str, Any], *, label: str, timeout_s: float | None = None,
                    output_times: bool = False) -> StreamResult:
        """Stream a chat completion (retried only under the recipe's explicit ``requests.retries``,
        every attempt recorded). ``output_times`` keeps the time of every output chunk (ITL)."""
        result = self._stream_once(body, label=label, timeout_s=timeout_s, output_times=output_times)
        for number in range(1, self.retries + 1):
            if result.ok:
                break
            result = self._stream_once(body, label=f"{label}-retry{number}", timeout_s=timeout_s,
                                       output_times=output_times)
        return result

    def stream_chat_once(self, body: dict[str, Any], *, label: str, output_times: bool = False) -> StreamResult:
        """One streamed attempt, never retried whatever the recipe says (a load level counts
        every request as sent)."""
        return self._stream_once(body, label=label, timeout_s=None, output_times=output_times)

    def _receive_stream(self, request: bytes, timeout_s: float | None, on_head: Callable[[int], BodySink]) -> None:
        """The streamed POST, its whole response read into ``on_head``'s sink: on the client's own
        socket transport, or through httpx where the client's httpx transport was replaced
        (tests, replays) or httpx must route it (a proxy)."""
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._stream_transport is not None and self._http is self._own_http:
            self._stream_transport.post("/v1/chat/completions", request, headers,
                                        connect_timeout=timeout_s if timeout_s is not None else 10.0,
                                        timeout=timeout_s if timeout_s is not None else self.timeout_s,
                                        on_head=on_head)
            return
        with self._http.stream("POST", "/v1/chat/completions", content=request, headers=headers,
                               timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT) as response:
            sink = on_head(response.status_code)
            if response.status_code != 200:
                sink(response.read())
                return
            for chunk in response.iter_raw():
                sink(chunk)

    def _stream_once(self, body: dict[str, Any], *, label: str, timeout_s: float | None,
                     output_times: bool = False) -> StreamResult:
        """Stream a chat completion, timing it and checking the SSE contract as it goes."""
        if self.guard is not None:
            self.guard.assert_usable()
        body = {"model": self.model, **body, "stream": True,
                "stream_options": {"include_usage": True, **(body.get("stream_options") or {})}}
        request = _dumps(body)
        attempt = Attempt(kind="stream", label=label, ok=False)
        result = StreamResult(attempt=attempt, status_code=None, output_times=[] if output_times else None)
        started = time.perf_counter()
        stream = StreamBody(result, started)
        raw = stream.raw
        try:
            self._receive_stream(request, timeout_s, stream.on_head)
        except httpx.HTTPError as exc:
            attempt.latency_s = result.e2e_s = time.perf_counter() - started
            result.error = f"{type(exc).__name__}: {exc}"
            result.violations.append(
                "stream broke after the 200 headers" if result.status_code == 200 else "no response")
            self._transport_failure(attempt, request, exc, bytes(raw))
            return result
        if result.status_code != 200:
            assert result.status_code is not None
            text = bytes(raw).decode(errors="replace")
            attempt.latency_s = result.e2e_s = time.perf_counter() - started
            attempt.error = _error_text(text)
            attempt.error_kind = f"http_{result.status_code}"
            self._emit(attempt, request, bytes(raw))
            self._check_server_error(attempt, result.status_code, text)
            return result
        stream.finish()
        end = time.perf_counter()
        attempt.latency_s = result.e2e_s = end - started
        if result.stream_error is not None:
            # The engine failed mid-request: an engine failure, not a missing usage chunk.
            error = result.stream_error
            attempt.error = (f"error event inside the 200 stream: {error.get('type') or 'error'}"
                             f" (code {error.get('code')}): {error.get('message', '')}")[:500]
            attempt.error_kind = "engine_error"
            self._emit(attempt, request, bytes(raw))
            self._check_server_error(attempt, 500, str(error.get("message", "")))
            return result
        if not result.saw_done:
            result.violations.append("stream ended without the [DONE] terminator")
        if result.usage is None:
            result.violations.append("stream has no usage chunk (stream_options.include_usage was sent)")
        attempt.ok = not result.violations
        if result.violations:
            attempt.error = "; ".join(result.violations)
            attempt.error_kind = "stream_contract"
        if result.usage:
            attempt.usage = {k: v for k, v in result.usage.items() if isinstance(v, int)}
        attempt.timing = {k: v for k, v in result.metrics().items() if k.endswith("_s") or k.endswith("tok_s")}
        self._emit(attempt, request, bytes(raw))
        return result
