"""The streaming path's own HTTP/1.1 transport: plain sockets, keep-alive, one epoll reader.

``QualClient.stream_chat`` sends its POST through ``StreamTransport`` where httpx would open a
plain connection itself; every failure is raised as the httpx exception httpx raises for it, so
the client handles both transports with one code. The shared verifying SSL context lives here
too: both this transport and the httpx clients of ``client`` use it. The bytes on the wire (one
connection, one response's framing) are ``client.http1``'s; ``BodySink`` is re-exported here,
where it was first defined, for a release.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable

import httpx

from .http1 import HAS_EPOLL as _HAS_EPOLL
from .http1 import READ_SIZE as _READ_SIZE
from .http1 import BodySink
from .http1 import Connection as _Connection
from .http1 import ResponseParser as _ResponseParser

__all__ = ["LAG_TIMER_PERIOD_S", "BodySink", "ReaderTimer", "StreamTransport", "shared_ssl_context", "watch_reader_lag"]


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying SSL context (certifi, or SSL_CERT_FILE/SSL_CERT_DIR), built once.

    httpx builds a new context and loads the whole CA bundle into it for every Client, even
    for a plain-http server, and a run makes one client per gate; what that costs is measured
    by benchmarks/bench_client.py (docs/PERFORMANCE.md).
    """
    return httpx.create_ssl_context()


# -- the streaming transport ---------------------------------------------------------------
#
# A live stream costs one socket read per chunk. Through httpx that read is httpcore's
# settimeout (an ioctl) + poll + recv, h11's chunk parser and httpx's stream layers, and with
# one thread per stream every chunk also wakes a thread that must win the GIL from the
# others (vLLM emits the chunks of a batch at once): about three times the CPU per chunk of
# vLLM bench's asyncio client (figures in docs/PERFORMANCE.md).
# The streaming path therefore speaks HTTP/1.1 itself on a plain socket, and on Linux one
# reader thread (``_StreamReactor``, epoll) reads every plain-http stream of the process:
# a burst of chunks costs one epoll wait and one recv per chunk in one thread, while each
# caller thread sleeps until its stream ends. Everything above the bytes (the raw copy, the
# SSE parse, every contract check, TTFT taken when the chunk is parsed) is the same code for
# both transports, and every failure is raised, in the caller's thread, as the httpx
# exception httpx raises for it, so attempt records, error kinds and the liveness guard see
# exactly what they saw before.

#: Idle keep-alive connections kept per client (httpx's default keep-alive limit).
_MAX_IDLE = 20
#: How often the reactor looks for streams past their read timeout (their precision).
_DEADLINE_CHECK_S = 0.05
#: The period of the reader's lag timer while a load level is measured (``ReaderTimer``).
LAG_TIMER_PERIOD_S = 0.01

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


class ReaderTimer:
    """A short timer the reader thread keeps while someone watches it: how late each firing came.

    The reader thread takes each chunk's time as it parses it, so however late this thread runs
    (waiting for a core, for the GIL, or parsing other streams' chunks first) is added to the
    client's TTFT and E2E. While ``watchers`` is above zero the thread wakes every
    ``LAG_TIMER_PERIOD_S`` and records by how much it overslept, after handling what woke it.
    """

    def __init__(self) -> None:
        self.watchers = 0
        self.due: float | None = None
        self.late: list[float] = []
        self.lock = threading.Lock()

    def watch(self) -> int:
        """Start (or join) a watch; the mark to pass to ``since``."""
        with self.lock:
            if self.watchers == 0:
                self.late.clear()
            self.watchers += 1
            return len(self.late)

    def unwatch(self) -> None:
        with self.lock:
            self.watchers = max(0, self.watchers - 1)

    def since(self, mark: int) -> list[float]:
        """Every oversleep (seconds) recorded since ``mark``."""
        with self.lock:
            return self.late[mark:]

    def timeout(self, timeout: float, now: float) -> float:
        """The reader's poll timeout, shortened to the timer's next firing while watched."""
        if not self.watchers:
            self.due = None
            return timeout
        if self.due is None:
            self.due = now + LAG_TIMER_PERIOD_S
        return min(timeout, max(0.0, self.due - now))

    def fired(self, now: float) -> None:
        """Record the oversleep where the timer was due by ``now``."""
        if self.due is not None and now >= self.due:
            with self.lock:
                self.late.append(now - self.due)
            self.due = now + LAG_TIMER_PERIOD_S


class _StreamReactor:
    """One thread that reads every plain-http stream of the process (epoll), parsing as it reads."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._streams: dict[int, _ReactorStream] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.timer = ReaderTimer()
        #: Written to wake the thread from a long idle poll when a watch starts.
        self._wake = os.eventfd(0, os.EFD_NONBLOCK) if hasattr(os, "eventfd") else None
        if self._wake is not None:
            self._epoll.register(self._wake, select.EPOLLIN)
        self._thread = threading.Thread(target=self._run, name="vllmqual-stream-reader", daemon=True)
        self._thread.start()

    def usable(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def watch_lag(self) -> int:
        """Start the reader's lag timer now (see ``ReaderTimer``); the mark for ``lag_since``."""
        mark = self.timer.watch()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.eventfd_write(self._wake, 1)
        return mark

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
            events = self._epoll.poll(self.timer.timeout(_DEADLINE_CHECK_S if self._streams else 1.0,
                                                         time.monotonic()))
            now = time.monotonic()
            for fd, _mask in events:
                if fd == self._wake:
                    with contextlib.suppress(OSError):
                        os.eventfd_read(fd)
                    continue
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
            if self.timer.due is not None:  # watched: no clock read per chunk otherwise
                self.timer.fired(time.monotonic())


_reactor: _StreamReactor | None = None
_reactor_lock = threading.Lock()


def _stream_reactor() -> _StreamReactor:
    """The process's reader thread, started on first use (and again in a forked child)."""
    global _reactor
    with _reactor_lock:
        if _reactor is None or not _reactor.usable():
            _reactor = _StreamReactor()
        return _reactor


def watch_reader_lag() -> tuple[ReaderTimer, int] | None:
    """Start watching the stream reader's lag now: its timer and the mark to read it from."""
    if not _HAS_EPOLL:
        return None
    reactor = _stream_reactor()
    return reactor.timer, reactor.watch_lag()


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
