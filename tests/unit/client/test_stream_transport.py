"""The streaming path's own HTTP/1.1 transport (``StreamTransport``) against real sockets.

Each test serves exact bytes from a loopback socket server, because the framings and faults
checked here (one byte per read, close-delimited HTTP/1.0 bodies, a cut inside a chunk, a
server that never answers, a stale keep-alive connection) are not something a real vLLM
server produces on demand. Every stream is read twice, once through the socket transport and
once through httpx on the same server, and the two must agree on everything an attempt
records: that is the transport's contract (same raw bytes and SHA-256, same SSE checks, same
error types and kinds).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_vllmqual.client import stream_transport as transport_module
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.records import Attempt

Reply = Callable[[socket.socket, bytes], None]


class Sink:
    def __init__(self) -> None:
        self.records: list[tuple[Attempt, bytes, bytes]] = []

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None:
        self.records.append((attempt, request, response))


class RawServer:
    """A loopback server that reads each request and answers with ``reply``; counts connections."""

    def __init__(self, reply: Reply, tls: ssl.SSLContext | None = None) -> None:
        self.reply = reply
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{'localhost' if self.tls else '127.0.0.1'}:{self.port}"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buffer[:length])
                buffer = buffer[length:]
                self.reply(conn, head)
        conn.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


@contextlib.contextmanager
def serving(reply: Reply, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    server = RawServer(reply, tls)
    try:
        yield server
    finally:
        server.close()


def events(n: int = 5, *, done: bool = True, usage: bool = True) -> list[bytes]:
    head = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    chunks: list[dict[str, Any]] = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**head, "choices": [{"index": 0, "delta": {"content": f"tok{i} é"},
                                     "finish_reason": "length" if i == n - 1 else None}]} for i in range(n)]
    if usage:
        chunks.append({**head, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n,
                                                       "total_tokens": 7 + n}})
    out = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks]
    return out + ([b"data: [DONE]\n\n"] if done else [])


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def sse_head(extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" + extra


def chunked_reply(parts: list[bytes], *, byte_by_byte: bool = False) -> Reply:
    def reply(conn: socket.socket, head: bytes) -> None:
        data = sse_head(b"transfer-encoding: chunked\r\n\r\n") + chunked(parts)
        if byte_by_byte:
            for i in range(len(data)):
                conn.sendall(data[i:i + 1])
        else:
            conn.sendall(data)
    return reply


def new_client(base_url: str, *, direct: bool, timeout_s: float = 5.0,
               api_key: str | None = None) -> tuple[QualClient, Sink]:
    sink = Sink()
    handle = ServerHandle(base_url=base_url, served_model_name="m", launcher_kind="external", api_key=api_key)
    client = QualClient(handle, timeout_s=timeout_s, sink=sink)
    if direct:
        assert client._stream_transport is not None
    else:
        client._stream_transport = None
    return client, sink


def comparable(result: StreamResult, sink: Sink) -> dict[str, Any]:
    """What an attempt records, without the clock readings."""
    (attempt, request, response), = sink.records
    record = attempt.to_dict()
    for key in ("latency_s", "timing"):
        record.pop(key)
    return {"attempt": record, "request": request, "response": response, "status": result.status_code,
            "content": result.content, "chunks": result.chunks, "violations": result.violations,
            "usage": result.usage, "finish": result.finish_reason, "saw_done": result.saw_done,
            "stream_error": result.stream_error, "error": result.error,
            "ttft_seen": result.ttft_s is not None}


def both_ways(reply: Reply, *, timeout_s: float = 5.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same stream through the socket transport and through httpx, on one server."""
    out = []
    with serving(reply) as server:
        for direct in (True, False):
            client, sink = new_client(server.base_url, direct=direct, timeout_s=timeout_s)
            with client:
                result = client.stream_chat({"messages": [{"role": "user", "content": "hi"}]}, label="s")
            out.append(comparable(result, sink))
    return out[0], out[1]


@pytest.fixture(params=["reactor", "caller"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both read modes: the shared epoll reader thread, and the caller's own thread (TLS, no epoll)."""
    if request.param == "caller":
        monkeypatch.setattr(transport_module, "_HAS_EPOLL", False)
    return str(request.param)


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_chunked_stream_matches_httpx(byte_by_byte: bool, reader: str) -> None:
    direct, via_httpx = both_ways(chunked_reply(events(), byte_by_byte=byte_by_byte))
    assert direct == via_httpx
    assert direct["attempt"]["ok"] is True and direct["content"] == "".join(f"tok{i} é" for i in range(5))
    assert direct["response"] == b"".join(events())


def test_one_event_split_over_chunks_and_several_events_in_one_chunk() -> None:
    body = b"".join(events())
    parts = [body[:3], body[3:50], body[50:51], body[51:]]
    direct, via_httpx = both_ways(chunked_reply(parts))
    assert direct == via_httpx and direct["attempt"]["ok"] is True and direct["chunks"] == 7


@pytest.mark.parametrize("framing", ["content-length", "close"])
def test_unchunked_bodies_match_httpx(framing: str) -> None:
    body = b"".join(events())

    def reply(conn: socket.socket, head: bytes) -> None:
        if framing == "content-length":
            conn.sendall(sse_head(b"content-length: %d\r\n\r\n" % len(body)) + body)
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + body)
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    direct, via_httpx = both_ways(reply)
    assert direct == via_httpx and direct["attempt"]["ok"] is True and direct["response"] == body


@pytest.mark.parametrize("case", ["no-done", "no-usage", "garbage"])
def test_contract_violations_match_httpx(case: str) -> None:
    parts = {"no-done": events(done=False), "no-usage": events(usage=False),
             "garbage": [b"data: {not json}\n\n", b"data: [DONE]\n\n"]}[case]
    direct, via_httpx = both_ways(chunked_reply(parts))
    assert direct == via_httpx
    assert direct["attempt"]["ok"] is False and direct["attempt"]["error_kind"] == "stream_contract"


def test_error_event_inside_a_200_stream_matches_httpx() -> None:
    error = b'data: {"error": {"message": "EngineCore encountered an issue", "type": "InternalServerError", ' \
            b'"code": 500}}\n\n'
    direct, via_httpx = both_ways(chunked_reply([events()[0], error, b"data: [DONE]\n\n"]))
    assert direct == via_httpx
    assert direct["attempt"]["error_kind"] == "engine_error" and direct["stream_error"]["code"] == 500


def test_http_error_status_matches_httpx() -> None:
    body = json.dumps({"object": "error", "message": "prompt too long", "type": "BadRequestError",
                       "code": 400}).encode()

    def reply(conn: socket.socket, head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(body), body))

    direct, via_httpx = both_ways(reply)
    assert direct == via_httpx
    assert direct["attempt"]["error_kind"] == "http_400" and direct["attempt"]["error"] == "prompt too long"
    assert direct["response"] == body


def test_a_stream_cut_inside_a_chunk_is_a_connection_failure_like_httpx(reader: str) -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        first = events()[0]
        conn.sendall(sse_head(b"transfer-encoding: chunked\r\n\r\n") + b"%x\r\n%s\r\n" % (len(first), first)
                     + b"40\r\ndata: {\"choi")
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    direct, via_httpx = both_ways(reply)
    assert direct == via_httpx
    assert direct["attempt"]["error_kind"] == "connection"
    assert direct["violations"] == ["stream broke after the 200 headers"]
    assert direct["error"].startswith("RemoteProtocolError: peer closed connection")


def test_a_server_that_closes_before_answering_matches_httpx(reader: str) -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    direct, via_httpx = both_ways(reply)
    assert direct == via_httpx and direct["violations"] == ["no response"]
    assert direct["error"] == "RemoteProtocolError: Server disconnected without sending a response."


def test_read_timeout_is_a_timeout_like_httpx(reader: str) -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        conn.sendall(sse_head(b"transfer-encoding: chunked\r\n\r\n") + chunked(events()[:2])[:-5])
        time.sleep(1.0)

    started = time.monotonic()
    direct, via_httpx = both_ways(reply, timeout_s=0.3)
    assert direct == via_httpx
    assert direct["attempt"]["error_kind"] == "timeout" and direct["error"] == "ReadTimeout: timed out"
    assert direct["violations"] == ["stream broke after the 200 headers"] and direct["ttft_seen"]
    assert time.monotonic() - started < 5


def test_refused_connection_is_a_connection_failure_like_httpx() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    out = []
    for direct in (True, False):
        client, sink = new_client(f"http://127.0.0.1:{port}", direct=direct)
        with client:
            result = client.stream_chat({"messages": []}, label="s")
        out.append(comparable(result, sink))
    assert out[0] == out[1]
    assert out[0]["attempt"]["error_kind"] == "connection" and out[0]["error"].startswith("ConnectError: ")


def test_liveness_guard_gets_the_httpx_exception() -> None:
    seen: list[Any] = []

    class Guard:
        def assert_usable(self) -> None:
            return None

        def after_failure(self, error: Exception | None, status_code: int | None, text: str, request: str | None = None) -> None:
            seen.append(error)
            return None

    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    handle = ServerHandle(base_url=f"http://127.0.0.1:{port}", served_model_name="m", launcher_kind="external")
    with QualClient(handle, timeout_s=5, guard=Guard()) as client:
        client.stream_chat({"messages": []}, label="s")
    assert len(seen) == 1 and isinstance(seen[0], httpx.ConnectError)


def test_keep_alive_reuses_the_connection_and_sends_what_httpx_sends(reader: str) -> None:
    with serving(chunked_reply(events())) as server:
        client, _ = new_client(server.base_url + "/prefix", direct=True, api_key="k-123")
        with client:
            for _ in range(3):
                assert client.stream_chat({"messages": []}, label="s").ok
        assert server.connections == 1 and len(server.requests) == 3
        head = server.requests[0].split(b"\r\n\r\n", 1)[0].decode()
        assert head.startswith("POST /prefix/v1/chat/completions HTTP/1.1\r\n")
        names = [line.split(":", 1)[0].lower() for line in head.split("\r\n")[1:]]
        assert len(names) == len(set(names)), names
        fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:]}
        assert fields["authorization"] == "Bearer k-123" and fields["host"] == f"127.0.0.1:{server.port}"
        assert fields["accept"] == "text/event-stream" and fields["content-type"] == "application/json"
        body = json.loads(server.requests[0].split(b"\r\n\r\n", 1)[1])
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        chunked_reply(events())(conn, head)
        conn.shutdown(socket.SHUT_RDWR)  # keep-alive timeout: the server closes the idle connection

    with serving(reply) as server:
        client, _ = new_client(server.base_url, direct=True)
        with client:
            first = client.stream_chat({"messages": []}, label="a")
            time.sleep(0.1)
            second = client.stream_chat({"messages": []}, label="b")
        assert first.ok and second.ok and server.connections == 2


def test_a_connection_marked_close_is_not_reused() -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        conn.sendall(sse_head(b"connection: close\r\ntransfer-encoding: chunked\r\n\r\n") + chunked(events()))

    with serving(reply) as server:
        client, _ = new_client(server.base_url, direct=True)
        with client:
            assert client.stream_chat({"messages": []}, label="a").ok
            assert client.stream_chat({"messages": []}, label="b").ok
        assert server.connections == 2


def test_a_proxy_from_the_environment_leaves_streaming_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    handle = ServerHandle(base_url="http://vllm.invalid:8000", served_model_name="m", launcher_kind="external")
    with QualClient(handle, timeout_s=5) as client:
        assert client._stream_transport is None
    monkeypatch.setenv("NO_PROXY", "vllm.invalid")
    with QualClient(handle, timeout_s=5) as client:
        assert client._stream_transport is not None


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_streams_on_the_shared_verifying_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(transport_module, "shared_ssl_context", lambda: trusting)
    with serving(chunked_reply(events()), tls=server_context) as server:
        client, sink = new_client(server.base_url, direct=True)
        with client:
            assert client.stream_chat({"messages": []}, label="a").ok
            assert client.stream_chat({"messages": []}, label="b").ok
        assert server.connections == 1 and sink.records[0][2] == b"".join(events())
        monkeypatch.setattr(transport_module, "shared_ssl_context", ssl.create_default_context)
        untrusting, sink = new_client(server.base_url, direct=True)
        with untrusting:
            result = untrusting.stream_chat({"messages": []}, label="c")
        assert result.attempt.error_kind == "connection" and "CERTIFICATE_VERIFY_FAILED" in (result.error or "")


def test_concurrent_streams_through_one_client_each_get_their_own_bytes(reader: str) -> None:
    """The concurrency gate's shape: one client, eight threads, streams interleaved on the wire."""
    def reply(conn: socket.socket, head: bytes) -> None:
        conn.sendall(sse_head(b"transfer-encoding: chunked\r\n\r\n"))
        for part in events(40):
            conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            time.sleep(0.001)
        conn.sendall(b"0\r\n\r\n")

    with serving(reply) as server:
        client, sink = new_client(server.base_url, direct=True)
        with client, ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda i: client.stream_chat({"messages": []}, label=f"s{i}"), range(16)))
    assert all(r.ok and r.chunks == 42 for r in results)
    assert all(response == b"".join(events(40)) for _, _, response in sink.records) and len(sink.records) == 16
    assert server.connections <= 8


def test_a_header_httpx_would_refuse_leaves_streaming_to_httpx() -> None:
    """A key with a line break would split the request head: httpx refuses to send it, so must we."""
    handle = ServerHandle(base_url="http://127.0.0.1:9", served_model_name="m", launcher_kind="external",
                          api_key="k\r\nX-Injected: 1")
    with QualClient(handle, timeout_s=5) as client:
        assert client._stream_transport is None
