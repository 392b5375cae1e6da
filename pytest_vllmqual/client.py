"""OpenAI-API calls with timing, usage and evidence, and nothing retried behind your back.

Every call becomes an ``Attempt``: status, latency, usage and the SHA-256 of the exact
request and response bytes, whose raw copies go to the private artifacts through the sink.
HTTP errors are results, not exceptions, so a gate can retain a 400 and go on. Transport
failures ask the liveness guard whether the server is gone; if it is, ``ServerGoneError``
ends the gate at once instead of each later gate waiting out its own timeout.

Streaming is parsed from the raw SSE so that the harness, not an SDK, decides what the
first token is: ``ttft_s`` is the first delta carrying output of any kind (content,
reasoning or a tool call), ``ttft_content_s`` the first visible content.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import select
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from .errors import ServerGoneError
from .launch.base import ServerHandle
from .records import Attempt


class AttemptSink(Protocol):
    """Receives every attempt with its raw bytes (stored privately, hashed publicly)."""

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None: ...


class LivenessGuard(Protocol):
    """Knows whether the server is still usable; shared by all gates of a run."""

    def assert_usable(self) -> None:
        """Raise ServerGoneError when the server is already known dead or hung."""

    def after_failure(self, error: Exception | None, status_code: int | None, text: str) -> ServerGoneError | None:
        """Decide, after a failed request, whether the server is gone (and remember it).

        ``error`` is the transport exception, or None for an HTTP error status.
        """


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying SSL context (certifi, or SSL_CERT_FILE/SSL_CERT_DIR), built once.

    httpx builds a new context and loads the whole CA bundle into it for every Client, even
    for a plain-http server: 20-90 ms each on the 2-core machines, and a run makes one client
    per gate (benchmarks/bench_client.py measures it).
    """
    return httpx.create_ssl_context()


def http_client(handle: ServerHandle, **kwargs: Any) -> httpx.Client:
    """An httpx client for ``handle``'s server (base URL, auth headers), on the shared SSL context."""
    return httpx.Client(base_url=handle.base_url, headers=handle.auth_headers(), verify=shared_ssl_context(),
                        **kwargs)


# -- the streaming transport ---------------------------------------------------------------
#
# A live stream costs one socket read per chunk. Through httpx that read is httpcore's
# settimeout (an ioctl) + poll + recv, h11's chunk parser and httpx's stream layers: 124 µs of
# CPU per chunk at 4,330 chunks/s on a GPU host, three times vLLM bench's asyncio client
# (docs/PERFORMANCE.md). The streaming path therefore speaks HTTP/1.1 itself on a plain
# socket: one blocking recv per read (the read timeout is the kernel's SO_RCVTIMEO on Linux
# plain-http sockets), the chunked framing parsed in place. Everything above the bytes (the
# raw copy, the SSE parse, every contract check) is the same code for both transports, and
# every failure is raised as the httpx exception httpx raises for it, so attempt records,
# error kinds and the liveness guard see exactly what they saw before.

#: Bytes asked of the kernel per read, as httpcore asks.
_READ_SIZE = 65536
#: A status line, header line or chunk-size line longer than this is a protocol error.
_MAX_LINE = 65536
#: Idle keep-alive connections kept per client (httpx's default keep-alive limit).
_MAX_IDLE = 20
_USE_SO_RCVTIMEO = sys.platform == "linux" and hasattr(socket, "SO_RCVTIMEO")


class _PeerClosed(Exception):
    """The server closed the connection where more bytes were due (mapped by the caller)."""


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class _Connection:
    """One HTTP/1.1 connection: a socket and the bytes read from it but not yet consumed."""

    __slots__ = ("buf", "kernel_timeouts", "pos", "sock", "tls")

    def __init__(self, sock: socket.socket, *, tls: bool) -> None:
        self.sock = sock
        self.tls = tls
        self.buf = b""
        self.pos = 0
        self.kernel_timeouts = _USE_SO_RCVTIMEO and not tls

    def set_timeout(self, seconds: float | None) -> None:
        """Read and write timeout of every later socket call (per read, as httpx's read timeout)."""
        if self.kernel_timeouts:
            # Blocking socket + SO_RCVTIMEO/SO_SNDTIMEO: one recv syscall per read, where a
            # Python socket timeout costs a poll before every recv. Expiry raises BlockingIOError.
            self.sock.settimeout(None)
            value = _timeval(seconds if seconds is not None else 0.0)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        else:
            self.sock.settimeout(seconds)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (TimeoutError, BlockingIOError) as exc:
            raise httpx.WriteTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc)) from exc

    def recv(self) -> bytes:
        try:
            return self.sock.recv(_READ_SIZE)
        except (TimeoutError, BlockingIOError) as exc:
            raise httpx.ReadTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc)) from exc

    def _more(self) -> None:
        data = self.recv()
        if not data:
            raise _PeerClosed
        self.buf = self.buf[self.pos:] + data if self.pos < len(self.buf) else data
        self.pos = 0

    def read_line(self) -> bytes:
        """The next CRLF-terminated line, without its CRLF."""
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = self.buf[self.pos:end]
                self.pos = end + 2
                return line
            if len(self.buf) - self.pos > _MAX_LINE:
                raise httpx.RemoteProtocolError("line too long in the response head or chunk framing")
            self._more()

    def read_some(self, limit: int) -> bytes:
        """Up to ``limit`` bytes: what is buffered, else one read."""
        if self.pos >= len(self.buf):
            data = self.recv()
            if not data:
                raise _PeerClosed
            self.buf, self.pos = data, 0
        end = self.pos + limit
        if self.pos == 0 and end >= len(self.buf):
            data, self.buf = self.buf, b""
            return data
        data = self.buf[self.pos:end]
        self.pos += len(data)
        return data

    def idle_and_open(self) -> bool:
        """Nothing unread and not closed by the server (httpcore's check before reusing a connection)."""
        if self.pos < len(self.buf):
            return False
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError, AttributeError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _DirectResponse:
    """The part of ``httpx.Response`` the streaming path uses, read straight off the socket."""

    def __init__(self, connection: _Connection, status_code: int, headers: dict[str, str], http10: bool) -> None:
        self.status_code = status_code
        self._connection = connection
        encoding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in encoding
        length = headers.get("content-length")
        self._length: int | None = None
        if not self._chunked and length is not None:
            try:
                self._length = int(length)
            except ValueError:
                raise httpx.RemoteProtocolError(f"malformed content-length {length!r}") from None
        self._no_body = status_code in (204, 304)
        self.keep_alive = not http10 and "close" not in headers.get("connection", "").lower() and (
            self._chunked or self._length is not None or self._no_body)
        #: The whole body was read, so the connection may carry the next request.
        self.complete = False

    def iter_raw(self) -> Iterator[bytes]:
        """The body's bytes as they arrive, framing removed (what ``httpx.Response.iter_raw`` yields)."""
        if self._no_body:
            self.complete = True
        elif self._chunked:
            yield from self._iter_chunked()
        elif self._length is not None:
            yield from self._iter_length(self._length)
        else:
            yield from self._iter_until_close()

    def read(self) -> bytes:
        return b"".join(self.iter_raw())

    def _iter_chunked(self) -> Iterator[bytes]:
        connection = self._connection
        try:
            while True:
                size_line = connection.read_line()
                try:
                    size = int(size_line.split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunk size {size_line[:40]!r}") from None
                if size == 0:
                    while connection.read_line():  # trailers, up to the empty line
                        pass
                    self.complete = True
                    return
                while size:
                    data = connection.read_some(size)
                    size -= len(data)
                    yield data
                if connection.read_line():
                    raise httpx.RemoteProtocolError("chunk data longer than its declared size")
        except _PeerClosed:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body (incomplete chunked read)") from None

    def _iter_length(self, length: int) -> Iterator[bytes]:
        received = 0
        try:
            while received < length:
                data = self._connection.read_some(length - received)
                received += len(data)
                yield data
        except _PeerClosed:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                f"(received {received} bytes, expected {length})") from None
        self.complete = True

    def _iter_until_close(self) -> Iterator[bytes]:
        try:
            while True:
                yield self._connection.read_some(_READ_SIZE)
        except _PeerClosed:
            self.complete = True


def _direct_target(base_url: httpx.URL) -> tuple[str, str, int, str, str] | None:
    """(scheme, host, port, host header, base path) when the streaming path may bypass httpx.

    Only where httpx itself would open a plain connection: http or https, no credentials or
    query in the base URL, and no proxy from the environment for it (httpx honours those).
    """
    if base_url.scheme not in ("http", "https") or base_url.userinfo or base_url.query or not base_url.host:
        return None
    proxies = urllib.request.getproxies()
    if (proxies.get(base_url.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(base_url.host):
        return None
    port = base_url.port or (443 if base_url.scheme == "https" else 80)
    host = base_url.host
    netloc = f"[{host}]" if ":" in host else host
    if base_url.port is not None:
        netloc = f"{netloc}:{base_url.port}"
    path = base_url.raw_path.decode("ascii").split("?", 1)[0]
    return base_url.scheme, host, port, netloc, path if path.endswith("/") else path + "/"


class StreamTransport:
    """HTTP/1.1 POSTs on plain sockets with keep-alive, for the streaming path only.

    Speaks to the same URL with the same headers as the httpx client beside it, and raises
    the httpx exception httpx would raise for each failure (connect/read/write timeout or
    error, a peer that closes mid-body), so callers handle both transports with one code.
    """

    def __init__(self, scheme: str, host: str, port: int, netloc: str, base_path: str,
                 headers: dict[str, str]) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.base_path = base_path
        self._head_prefix = (f"Host: {netloc}\r\nAccept: */*\r\nConnection: keep-alive\r\n"
                             f"User-Agent: python-httpx/{httpx.__version__}\r\n")
        self._headers = dict(headers)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_client(cls, http: httpx.Client, headers: dict[str, str]) -> StreamTransport | None:
        target = _direct_target(http.base_url)
        return cls(*target, headers=headers) if target is not None else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _connect(self, connect_timeout: float | None) -> _Connection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=connect_timeout)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                sock = shared_ssl_context().wrap_socket(sock, server_hostname=self.host)
        except TimeoutError as exc:
            sock.close()
            raise httpx.ConnectTimeout("timed out") from exc
        except OSError as exc:
            sock.close()
            raise httpx.ConnectError(str(exc)) from exc
        return _Connection(sock, tls=self.scheme == "https")

    def _acquire(self, connect_timeout: float | None) -> _Connection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect(connect_timeout)
            if connection.idle_and_open():
                return connection
            connection.close()

    def _release(self, connection: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(connection)
                return
        connection.close()

    @contextlib.contextmanager
    def post(self, path: str, content: bytes, headers: dict[str, str], *, connect_timeout: float | None,
             timeout: float | None) -> Iterator[_DirectResponse]:
        """POST ``content`` to ``path`` under the base URL; the response body is read by the caller."""
        head = [f"POST {self.base_path}{path.lstrip('/')} HTTP/1.1\r\n", self._head_prefix]
        merged = {**self._headers, **headers}
        head.extend(f"{name}: {value}\r\n" for name, value in merged.items())
        head.append(f"Content-Length: {len(content)}\r\n\r\n")
        connection = self._acquire(connect_timeout)
        response: _DirectResponse | None = None
        try:
            connection.set_timeout(timeout)
            connection.send("".join(head).encode("latin-1") + content)
            response = self._read_head(connection)
            yield response
        except BaseException:
            connection.close()
            raise
        if response.complete and response.keep_alive:
            self._release(connection)
        else:
            connection.close()

    @staticmethod
    def _read_head(connection: _Connection) -> _DirectResponse:
        try:
            while True:
                status_line = connection.read_line()
                parts = status_line.split(None, 2)
                if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                    raise httpx.RemoteProtocolError(f"malformed status line {status_line[:80]!r}")
                headers: dict[str, str] = {}
                while line := connection.read_line():
                    name, sep, value = line.partition(b":")
                    if not sep:
                        raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
                    key = name.strip().decode("latin-1").lower()
                    text = value.strip().decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
                status = int(parts[1])
                if status >= 200:
                    return _DirectResponse(connection, status, headers, parts[0] == b"HTTP/1.0")
        except _PeerClosed:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


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


@dataclass
class ChatResult:
    """A non-streamed response (chat, responses, or any JSON endpoint)."""

    attempt: Attempt
    status_code: int | None
    body: dict[str, Any] | None
    text: str

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

    @property
    def ok(self) -> bool:
        return self.attempt.ok

    def metrics(self) -> dict[str, float | int | None]:
        """The DESIGN.md metrics for this request."""
        prompt = (self.usage or {}).get("prompt_tokens")
        completion = (self.usage or {}).get("completion_tokens")
        prefill = prompt / self.ttft_s if prompt and self.ttft_s else None
        decode = None
        if completion and completion > 1 and self.e2e_s and self.ttft_s and self.e2e_s > self.ttft_s:
            decode = (completion - 1) / (self.e2e_s - self.ttft_s)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "ttft_s": self.ttft_s,
            "ttft_content_s": self.ttft_content_s,
            "e2e_s": self.e2e_s,
            "prefill_tok_s": prefill,
            "decode_tok_s": decode,
        }


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
        gone = self.guard.after_failure(exc, None, '') if self.guard is not None else None
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
        gone = self.guard.after_failure(None, status_code, text)
        if gone is not None:
            attempt.error_kind = gone.status
            raise gone

    def get_json(self, path: str, *, timeout_s: float = 10.0) -> Any:
        """GET an informational endpoint (not an attempt of any gate)."""
        response = self._http.get(path, timeout=timeout_s)
        response.raise_for_status()
        return response.json()

    def chat(self, body: dict[str, Any], *, label: str, expect_status: int = 200,
             timeout_s: float | None = None) -> ChatResult:
        body = {"model": self.model, **body}
        return self.post_json("/v1/chat/completions", body, kind="chat", label=label,
                              expect_status=expect_status, timeout_s=timeout_s)

    def responses(self, body: dict[str, Any], *, label: str) -> ChatResult:
        body = {"model": self.model, **body}
        return self.post_json("/v1/responses", body, kind="responses", label=label)

    def tokenize_chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                      chat_template_kwargs: dict[str, Any] | None = None, label: str = "tokenize") -> ChatResult:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        return self.post_json("/tokenize", body, kind="tokenize", label=label)

    # -- streaming ------------------------------------------------------------------------

    def stream_chat(self, body: dict[str, Any], *, label: str, timeout_s: float | None = None) -> StreamResult:
        """Stream a chat completion (retried only under the recipe's explicit ``requests.retries``,
        every attempt recorded)."""
        result = self._stream_once(body, label=label, timeout_s=timeout_s)
        for number in range(1, self.retries + 1):
            if result.ok:
                break
            result = self._stream_once(body, label=f"{label}-retry{number}", timeout_s=timeout_s)
        return result

    def _open_stream(self, request: bytes, timeout_s: float | None) -> contextlib.AbstractContextManager[Any]:
        """The streamed POST: on the client's own socket transport, or through httpx where the
        client's httpx transport was replaced (tests, replays) or httpx must route it (a proxy)."""
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._stream_transport is not None and self._http is self._own_http:
            connect = timeout_s if timeout_s is not None else 10.0
            return self._stream_transport.post("/v1/chat/completions", request, headers, connect_timeout=connect,
                                               timeout=timeout_s if timeout_s is not None else self.timeout_s)
        return self._http.stream("POST", "/v1/chat/completions", content=request, headers=headers,
                                 timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)

    def _stream_once(self, body: dict[str, Any], *, label: str, timeout_s: float | None) -> StreamResult:
        """Stream a chat completion, timing it and checking the SSE contract as it goes."""
        if self.guard is not None:
            self.guard.assert_usable()
        body = {"model": self.model, **body, "stream": True,
                "stream_options": {"include_usage": True, **(body.get("stream_options") or {})}}
        request = _dumps(body)
        attempt = Attempt(kind="stream", label=label, ok=False)
        result = StreamResult(attempt=attempt, status_code=None)
        raw = bytearray()
        started = time.perf_counter()
        try:
            with self._open_stream(request, timeout_s) as response:
                result.status_code = attempt.status_code = response.status_code
                if response.status_code != 200:
                    body_bytes = response.read()
                    raw += body_bytes
                    attempt.latency_s = result.e2e_s = time.perf_counter() - started
                    attempt.error = _error_text(body_bytes.decode(errors="replace"))
                    attempt.error_kind = f"http_{response.status_code}"
                    self._emit(attempt, request, bytes(raw))
                    self._check_server_error(attempt, response.status_code, body_bytes.decode(errors="replace"))
                    return result
                for line in _iter_lines(response, raw):
                    _consume_sse_line(line, result, started)
        except httpx.HTTPError as exc:
            attempt.latency_s = result.e2e_s = time.perf_counter() - started
            result.error = f"{type(exc).__name__}: {exc}"
            result.violations.append(
                "stream broke after the 200 headers" if result.status_code == 200 else "no response")
            self._transport_failure(attempt, request, exc, bytes(raw))
            return result
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


def _iter_lines(response: httpx.Response, raw: bytearray) -> Iterator[str]:
    """The SSE body's ``data:`` lines, keeping the raw bytes for the private artifact.

    Other lines (the blank line ending each event, comments, ``event:`` fields) are dropped
    here, undecoded: ``_consume_sse_line`` ignores them. One split per read, not per line.
    """
    buffer = b""
    for chunk in response.iter_raw():
        raw += chunk
        if b"\n" not in chunk:
            buffer += chunk
            continue
        lines = (buffer + chunk if buffer else chunk).split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                yield line.decode(errors="replace").rstrip("\r")
    if buffer.startswith(b"data:"):
        yield buffer.decode(errors="replace")


#: json.loads without its wrapper: the C scanner on an already stripped payload (``loads``
#: skips JSON whitespace on both sides and rejects anything after the value; so does this).
_scan_json = json.JSONDecoder().scan_once


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
        # The clock is read only while a first-output time is still open (ttft_content_s is
        # set last: content implies output).
        if result.ttft_content_s is None and (content or reasoning or tool_deltas):
            now = time.perf_counter() - started
            if result.ttft_s is None:
                result.ttft_s = now
            if content:
                result.ttft_content_s = now
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
