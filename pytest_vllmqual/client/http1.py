"""HTTP/1.1 on a plain socket, as the streaming transport speaks it: one connection and one
response's framing (status line, headers, chunked or sized body), parsed as the bytes arrive.

Every failure is raised as the httpx exception httpx raises for it (a read timeout, a write
error, a peer that closes mid-body with h11's words), so the client above handles this wire and
httpx's with one code. ``client.stream_transport`` opens the connections, keeps them alive and
reads them (in one epoll thread on Linux); this module only moves and frames the bytes.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import sys
from collections.abc import Callable, Generator

import httpx

__all__ = ["HAS_EPOLL", "READ_SIZE", "BodySink", "Connection", "ResponseParser"]

#: Bytes asked of the kernel per read, as httpcore asks.
READ_SIZE = 65536
#: A status line, header line or chunk-size line longer than this is a protocol error.
_MAX_LINE = 65536
_USE_SO_RCVTIMEO = sys.platform == "linux" and hasattr(socket, "SO_RCVTIMEO")
HAS_EPOLL = hasattr(select, "epoll")
"""Linux: plain sockets are read by the transport's one epoll reader thread."""

BodySink = Callable[[bytes], None]
"""Where a response's body bytes go, framing removed."""


class _PeerClosed(Exception):
    """The server closed the connection where more bytes were due (mapped by the parser)."""


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class Connection:
    """One HTTP/1.1 connection to the server."""

    __slots__ = ("kernel_timeouts", "sock", "tls", "use_reactor")

    def __init__(self, sock: socket.socket, *, tls: bool) -> None:
        self.sock = sock
        self.tls = tls
        self.kernel_timeouts = _USE_SO_RCVTIMEO and not tls
        #: Read by the shared reader thread (plain sockets on Linux) or by the caller's thread.
        self.use_reactor = HAS_EPOLL and not tls

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
            return self.sock.recv(READ_SIZE)
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


class ResponseParser:
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
                    sink((yield from self._take(READ_SIZE)))
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
