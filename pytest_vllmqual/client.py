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
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Generator
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
# settimeout (an ioctl) + poll + recv, h11's chunk parser and httpx's stream layers, and with
# one thread per stream every chunk also wakes a thread that must win the GIL from the
# others (vLLM emits the chunks of a batch at once): 124 µs of CPU per chunk at 4,330
# chunks/s on a GPU host, three times vLLM bench's asyncio client (docs/PERFORMANCE.md).
# The streaming path therefore speaks HTTP/1.1 itself on a plain socket, and on Linux one
# reader thread (``_StreamReactor``, epoll) reads every plain-http stream of the process:
# a burst of chunks costs one epoll wait and one recv per chunk in one thread, while each
# caller thread sleeps until its stream ends. Everything above the bytes (the raw copy, the
# SSE parse, every contract check, TTFT taken when the chunk is parsed) is the same code for
# both transports, and every failure is raised, in the caller's thread, as the httpx
# exception httpx raises for it, so attempt records, error kinds and the liveness guard see
# exactly what they saw before.

#: Bytes asked of the kernel per read, as httpcore asks.
_READ_SIZE = 65536
#: A status line, header line or chunk-size line longer than this is a protocol error.
_MAX_LINE = 65536
#: Idle keep-alive connections kept per client (httpx's default keep-alive limit).
_MAX_IDLE = 20
_USE_SO_RCVTIMEO = sys.platform == "linux" and hasattr(socket, "SO_RCVTIMEO")
_HAS_EPOLL = hasattr(select, "epoll")
#: How often the reactor looks for streams past their read timeout (their precision).
_DEADLINE_CHECK_S = 0.05

BodySink = Callable[[bytes], None]


class _PeerClosed(Exception):
    """The server closed the connection where more bytes were due (mapped by the parser)."""


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class _Connection:
    """One HTTP/1.1 connection to the server."""

    __slots__ = ("kernel_timeouts", "sock", "tls", "use_reactor")

    def __init__(self, sock: socket.socket, *, tls: bool) -> None:
        self.sock = sock
        self.tls = tls
        self.kernel_timeouts = _USE_SO_RCVTIMEO and not tls
        #: Read by the shared reader thread (plain sockets on Linux) or by the caller's thread.
        self.use_reactor = _HAS_EPOLL and not tls

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

    def idle_and_open(self) -> bool:
        """Not closed by the server while idle (httpcore's check before reusing a connection)."""
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError, AttributeError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _ResponseParser:
    """One HTTP/1.1 response, parsed from the bytes as they arrive (``feed``, ``b""`` at EOF).

    ``on_head(status)`` is called once the head is read and returns where the body's bytes
    go, framing removed (what ``httpx.Response.iter_raw`` yields). Framing errors and a peer
    that closes early raise ``httpx.RemoteProtocolError`` with h11's words.
    """

    def __init__(self, on_head: Callable[[int], BodySink]) -> None:
        self._on_head = on_head
        self._buf = b""
        self._pos = 0
        self.keep_alive = False
        #: The whole response was read and nothing followed it: the connection may be reused.
        self.complete = False
        self._steps = self._parse()
        next(self._steps)  # runs to the first read: every yield waits for bytes

    def feed(self, data: bytes) -> bool:
        """True once the response is complete."""
        try:
            self._steps.send(data)
        except StopIteration:
            self.complete = True
        return self.complete

    def _fill(self) -> Generator[None, bytes, None]:
        data = yield
        if not data:
            raise _PeerClosed
        self._buf = self._buf[self._pos:] + data if self._pos < len(self._buf) else data
        self._pos = 0

    def _line(self) -> Generator[None, bytes, bytes]:
        """The next CRLF-terminated line, without its CRLF."""
        while True:
            end = self._buf.find(b"\r\n", self._pos)
            if end >= 0:
                line = self._buf[self._pos:end]
                self._pos = end + 2
                return line
            if len(self._buf) - self._pos > _MAX_LINE:
                raise httpx.RemoteProtocolError("line too long in the response head or chunk framing")
            yield from self._fill()

    def _take(self, limit: int) -> Generator[None, bytes, bytes]:
        """Up to ``limit`` bytes: what is buffered, else the next read."""
        if self._pos >= len(self._buf):
            yield from self._fill()
        if self._pos == 0 and limit >= len(self._buf):
            data, self._buf = self._buf, b""
            return data
        data = self._buf[self._pos:self._pos + limit]
        self._pos += len(data)
        return data

    def _parse(self) -> Generator[None, bytes, None]:
        try:
            status, headers, http10 = yield from self._head()
        except _PeerClosed:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.") from None
        sink = self._on_head(status)
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: int | None = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise httpx.RemoteProtocolError(f"malformed content-length {headers['content-length']!r}") from None
        no_body = status in (204, 304)
        self.keep_alive = not http10 and "close" not in headers.get("connection", "").lower() and (
            chunked or length is not None or no_body)
        if no_body:
            pass
        elif chunked:
            yield from self._chunked(sink)
        elif length is not None:
            yield from self._length(sink, length)
        else:
            try:
                while True:
                    sink((yield from self._take(_READ_SIZE)))
            except _PeerClosed:
                return
        if self._pos < len(self._buf):
            self.keep_alive = False  # bytes after the response: do not reuse what we cannot explain

    def _head(self) -> Generator[None, bytes, tuple[int, dict[str, str], bool]]:
        while True:
            status_line = yield from self._line()
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise httpx.RemoteProtocolError(f"malformed status line {status_line[:80]!r}")
            headers: dict[str, str] = {}
            while line := (yield from self._line()):
                name, sep, value = line.partition(b":")
                if not sep:
                    raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
                key = name.strip().decode("latin-1").lower()
                text = value.strip().decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            status = int(parts[1])
            if status >= 200:  # 1xx: an interim response, the real one follows
                return status, headers, parts[0] == b"HTTP/1.0"

    def _chunked(self, sink: BodySink) -> Generator[None, bytes, None]:
        try:
            while True:
                size_line = yield from self._line()
                try:
                    size = int(size_line.split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunk size {size_line[:40]!r}") from None
                if size == 0:
                    while (yield from self._line()):  # trailers, up to the empty line
                        pass
                    return
                while size:
                    data = yield from self._take(size)
                    size -= len(data)
                    sink(data)
                if (yield from self._line()):
                    raise httpx.RemoteProtocolError("chunk data longer than its declared size")
        except _PeerClosed:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body (incomplete chunked read)") from None

    def _length(self, sink: BodySink, length: int) -> Generator[None, bytes, None]:
        received = 0
        try:
            while received < length:
                data = yield from self._take(length - received)
                received += len(data)
                sink(data)
        except _PeerClosed:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                f"(received {received} bytes, expected {length})") from None


class _ReactorStream:
    """A response the reactor reads for a waiting caller."""

    __slots__ = ("connection", "deadline", "done", "error", "fd", "parser", "timeout")

    def __init__(self, connection: _Connection, parser: _ResponseParser, timeout: float | None) -> None:
        self.connection = connection
        self.fd = connection.sock.fileno()
        self.parser = parser
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self.done = threading.Event()
        self.error: BaseException | None = None


class _StreamReactor:
    """One thread that reads every plain-http stream of the process (epoll), parsing as it reads."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._streams: dict[int, _ReactorStream] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="vllmqual-stream-reader", daemon=True)
        self._thread.start()

    def usable(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def read(self, connection: _Connection, parser: _ResponseParser, timeout: float | None) -> None:
        """Read the whole response; raise what reading it raised, in the caller's thread."""
        connection.sock.setblocking(False)
        stream = _ReactorStream(connection, parser, timeout)
        with self._lock:
            self._streams[stream.fd] = stream
            self._epoll.register(stream.fd, select.EPOLLIN)
        try:
            while not stream.done.wait(1.0):
                if not self._thread.is_alive():
                    raise httpx.ReadError("the stream reader thread stopped")
        finally:
            self._forget(stream)
        if stream.error is not None:
            raise stream.error

    def _forget(self, stream: _ReactorStream) -> None:
        with self._lock:
            if self._streams.get(stream.fd) is stream:
                del self._streams[stream.fd]
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(stream.fd)

    def _finish(self, stream: _ReactorStream, error: BaseException | None) -> None:
        self._forget(stream)
        stream.error = error
        stream.done.set()

    def _run(self) -> None:
        next_check = 0.0
        while True:
            events = self._epoll.poll(_DEADLINE_CHECK_S if self._streams else 1.0)
            now = time.monotonic()
            for fd, _mask in events:
                stream = self._streams.get(fd)
                if stream is None or stream.done.is_set():
                    continue
                try:
                    data = stream.connection.sock.recv(_READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._finish(stream, httpx.ReadError(str(exc)))
                    continue
                if stream.timeout is not None:
                    stream.deadline = now + stream.timeout
                try:
                    complete = stream.parser.feed(data)
                except BaseException as exc:  # raised again in the caller's thread
                    self._finish(stream, exc)
                    continue
                if complete:
                    self._finish(stream, None)
            if now >= next_check:
                next_check = now + _DEADLINE_CHECK_S
                for stream in list(self._streams.values()):
                    if stream.deadline is not None and now >= stream.deadline and not stream.done.is_set():
                        self._finish(stream, httpx.ReadTimeout("timed out"))


_reactor: _StreamReactor | None = None
_reactor_lock = threading.Lock()


def _stream_reactor() -> _StreamReactor:
    """The process's reader thread, started on first use (and again in a forked child)."""
    global _reactor
    with _reactor_lock:
        if _reactor is None or not _reactor.usable():
            _reactor = _StreamReactor()
        return _reactor


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
        #: httpx's default headers, then the client's, by lower-cased name (a later one replaces).
        self._headers: dict[str, tuple[str, str]] = {}
        defaults = {"Host": netloc, "Accept": "*/*", "Connection": "keep-alive",
                    "User-Agent": f"python-httpx/{httpx.__version__}"}
        for name, value in (*defaults.items(), *headers.items()):
            self._headers[name.lower()] = (name, value)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_client(cls, http: httpx.Client, headers: dict[str, str]) -> StreamTransport | None:
        """The transport for ``http``'s server, or None where httpx must carry the streams (a
        proxy, credentials in the URL, a header httpx would refuse to send)."""
        target = _direct_target(http.base_url)
        if target is None or any(ch in text for item in headers.items() for text in item for ch in "\r\n\0"):
            return None
        return cls(*target, headers=headers)

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

    def post(self, path: str, content: bytes, headers: dict[str, str], *, connect_timeout: float | None,
             timeout: float | None, on_head: Callable[[int], BodySink]) -> None:
        """POST ``content`` to ``path`` under the base URL and read the whole response into ``on_head``'s sink."""
        fields = dict(self._headers)
        for name, value in headers.items():
            fields[name.lower()] = (name, value)
        head = [f"POST {self.base_path}{path.lstrip('/')} HTTP/1.1\r\n"]
        head.extend(f"{name}: {value}\r\n" for name, value in fields.values())
        head.append(f"Content-Length: {len(content)}\r\n\r\n")
        connection = self._acquire(connect_timeout)
        parser = _ResponseParser(on_head)
        try:
            connection.set_timeout(timeout)
            connection.send("".join(head).encode("latin-1") + content)
            if connection.use_reactor:
                _stream_reactor().read(connection, parser, timeout)
            else:
                while not parser.feed(connection.recv()):
                    pass
        except BaseException:
            connection.close()
            raise
        if parser.keep_alive:
            self._release(connection)
        else:
            connection.close()


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

    def __repr__(self) -> str:
        """No server text: a failed assertion prints this repr into junit and the terminal."""
        return (f"StreamResult(status_code={self.status_code}, attempt={self.attempt.label!r}, "
                f"chunks={self.chunks}, violations={len(self.violations)})")

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

    def _stream_once(self, body: dict[str, Any], *, label: str, timeout_s: float | None) -> StreamResult:
        """Stream a chat completion, timing it and checking the SSE contract as it goes."""
        if self.guard is not None:
            self.guard.assert_usable()
        body = {"model": self.model, **body, "stream": True,
                "stream_options": {"include_usage": True, **(body.get("stream_options") or {})}}
        request = _dumps(body)
        attempt = Attempt(kind="stream", label=label, ok=False)
        result = StreamResult(attempt=attempt, status_code=None)
        started = time.perf_counter()
        stream = _StreamBody(result, started)
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


class _StreamBody:
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
