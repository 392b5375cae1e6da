"""Benchmark: the harness's own client cost, and the plugin's import + collection time.

    python -m benchmarks.bench_client                  # replay a synthetic vLLM SSE body
    python -m benchmarks.bench_client --sse FILE       # replay a recorded SSE body
    python -m benchmarks.bench_client --collect        # also time `pytest --collect-only -q suites`
    python -m benchmarks.bench_client --quick [--collect] [--json PATH]   # a few repeats, seconds

Replay: one SSE body (recorded from the real server by ``bench_fidelity``, or built here in
vLLM 0.32's exact chunk format) is fed through ``QualClient.stream_chat`` on the client's own
streaming transport, whose socket is replaced by a stand-in that returns one HTTP chunk (one
SSE event) per read, as the real socket does (``--transport httpx``: httpx over
``httpx.MockTransport`` instead, the path tests and proxies take). The CPU time of the whole
call (request build, chunk framing, SSE parse, TTFT bookkeeping, SHA-256 of the raw bytes,
attempt record) divided by the chunks gives the client's CPU per chunk; no network and no
server share the measurement. The socket's own cost is measured by
``bench_stream_loopback.py``, and the real-server figure (CPU per chunk at the highest chunk
rate the server produces, beside vLLM bench's client) by ``bench_fidelity``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.quick_mode import add_quick_flag
from pytest_vllmqual.client.http1 import Connection as _Connection
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.stream_transport import StreamTransport
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.records import Attempt

ROOT = Path(__file__).resolve().parent.parent

#: Quick mode (benchmarks/quick_mode.py): the same measurements, a few repeats each.
QUICK_REPEATS = {"replay": 3, "construction": 3, "collect": 1}


def synthetic_sse_events(completion_tokens: int = 256, prompt_tokens: int = 1024) -> list[bytes]:
    """A streamed chat completion in vLLM 0.32's chunk format: role, tokens, finish, usage, DONE."""
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "tiny-chat"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}]}]
    words = ["The", " cloud", " is", " a", " visible", " mass", " of", " water", " drop", "lets"]
    for i in range(completion_tokens):
        last = i == completion_tokens - 1
        events.append({**head, "choices": [{"index": 0, "delta": {"content": words[i % len(words)]},
                                            "logprobs": None, "finish_reason": "length" if last else None,
                                            **({"stop_reason": None} if last else {})}]})
    events.append({**head, "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                    "total_tokens": prompt_tokens + completion_tokens,
                                                    "completion_tokens": completion_tokens}})
    out = [f"data: {json.dumps(e, separators=(',', ':'))}\n\n".encode() for e in events]
    out.append(b"data: [DONE]\n\n")
    return out


def split_sse_events(body: bytes) -> list[bytes]:
    """A recorded SSE body cut back into its events (one per socket read on the real server)."""
    parts = body.split(b"\n\n")
    events = [part + b"\n\n" for part in parts if part.strip()]
    return events


class _Sink:
    """Stands in for the gate recorder without file I/O: keeps the attempt, drops the bytes."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []

    def record_attempt(self, attempt: Attempt, request: bytes, response: bytes) -> None:
        self.attempts.append(attempt)


class _ReplaySocket:
    """A socket whose reads return a canned HTTP/1.1 chunked SSE response, one event per read."""

    def __init__(self, events: list[bytes]) -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        self._reads = [head] + [b"%x\r\n%s\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]
        self._next = len(self._reads)

    def sendall(self, data: bytes) -> None:
        self._next = 0  # a request: answer it from the first read on

    def recv(self, size: int) -> bytes:
        if self._next >= len(self._reads):
            return b""
        self._next += 1
        return self._reads[self._next - 1]

    def settimeout(self, value: float | None) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


class _ReplayTransport(StreamTransport):
    """The client's own streaming transport, with a replay socket where it would connect."""

    def __init__(self, events: list[bytes], handle: ServerHandle) -> None:
        super().__init__("http", "replay.invalid", 80, "replay.invalid", "/", handle.auth_headers())
        self._events = events

    def _connect(self, connect_timeout: float | None) -> _Connection:
        connection = _Connection(_ReplaySocket(self._events), tls=False)  # type: ignore[arg-type]
        connection.use_reactor = False  # no file descriptor: read in the caller's thread
        return connection


def replay_client(events: list[bytes], *, transport: str = "socket") -> QualClient:
    """A QualClient whose transport answers every chat request with ``events``, one per read.

    ``socket`` (the live streaming path): the client's own HTTP/1.1 transport over a socket
    stand-in; ``httpx``: httpx over ``httpx.MockTransport`` (the path tests and proxies use).
    """

    def handler(request: httpx.Request) -> httpx.Response:
        def stream() -> Iterator[bytes]:
            yield from events
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    handle = ServerHandle(base_url="http://replay.invalid", served_model_name="tiny-chat", launcher_kind="external")
    client = QualClient(handle, timeout_s=30.0, sink=_Sink())
    # The transport is the one thing swapped; every line of stream_chat runs as in a gate.
    if transport == "socket":
        client._stream_transport = _ReplayTransport(events, handle)
    else:
        client._http.close()
        client._http = httpx.Client(base_url=handle.base_url, transport=httpx.MockTransport(handler))
    return client


def measure_replay(events: list[bytes], *, repeats: int = 30, prompt_chars: int = 4096,
                   transport: str = "socket") -> dict[str, Any]:
    """CPU seconds per streamed request and per chunk, replaying ``events`` through stream_chat."""
    client = replay_client(events, transport=transport)
    body = {"messages": [{"role": "user", "content": "x " * (prompt_chars // 2)}], "max_tokens": 256,
            "temperature": 0, "ignore_eos": True}
    chunks = 0
    for _ in range(3):  # warm-up: imports, first-call caches
        result = client.stream_chat(body, label="warm")
        chunks = result.chunks
    if not result.ok:
        raise RuntimeError(f"replay stream broke its contract: {result.violations}")
    per_request: list[float] = []
    for _ in range(repeats):
        start = time.process_time()
        client.stream_chat(body, label="replay")
        per_request.append(time.process_time() - start)
    client.close()
    median = statistics.median(per_request)
    return {
        "transport": transport,
        "events": len(events),
        "data_chunks": chunks,
        "bytes": sum(len(e) for e in events),
        "repeats": repeats,
        "cpu_s_per_request_median": median,
        "cpu_s_per_request_min": min(per_request),
        "cpu_us_per_chunk": median / max(chunks, 1) * 1e6,
    }


def measure_client_construction(*, repeats: int = 20) -> dict[str, Any]:
    """Seconds to construct a QualClient: every gate pays it once (the qual_client fixture)."""
    handle = ServerHandle(base_url="http://127.0.0.1:9", served_model_name="tiny-chat", launcher_kind="external")
    QualClient(handle, timeout_s=30.0).close()  # first one: imports and one-time setup
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        client = QualClient(handle, timeout_s=30.0)
        times.append(time.perf_counter() - start)
        client.close()
    return {"repeats": repeats, "construct_s_median": statistics.median(times), "construct_s_max": max(times)}


def time_collect_only(*, repeats: int = 7, target: str = "suites", import_repeats: int = 5,
                      warm: bool = True) -> dict[str, Any]:
    """Wall time of ``pytest --collect-only -q suites``, beside bare pytest start-up.

    The baseline is the same pytest (with every other installed plugin) collecting an empty
    directory without this plugin: the difference is what the plugin and its gates cost.
    The first run of each populates the bytecode caches (pytest's rewritten ``.pyc`` of the
    plugin package), as a user's second run and every CI run after the install find them.
    Each configuration is then timed ``repeats`` times, interleaved; medians are kept.
    ``warm=False`` (quick mode) leaves the first runs out.
    """
    pytest_bin = str(Path(sys.executable).with_name("pytest"))
    env_warm = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="vllmqual-empty-") as empty:
        commands = {
            "with_plugin": [pytest_bin, "--collect-only", "-q", target],
            "baseline": [pytest_bin, "-p", "no:vllmqual", "-p", "no:cacheprovider", "--collect-only", "-q",
                         "--rootdir", empty, empty],
        }
        for argv in commands.values() if warm else ():
            subprocess.run(argv, cwd=ROOT, env=env_warm, capture_output=True, check=False)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        collected = ""
        for _ in range(repeats):
            for name, argv in commands.items():
                start = time.perf_counter()
                proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
                walls[name].append(time.perf_counter() - start)
                if name == "with_plugin":
                    if proc.returncode != 0:
                        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stdout[-500:]}")
                    collected = next((line for line in proc.stdout.splitlines() if "collected" in line), "")
    with_plugin = statistics.median(walls["with_plugin"])
    baseline = statistics.median(walls["baseline"])
    return {
        "command": f"pytest --collect-only -q {target}",
        "repeats": repeats,
        "wall_s_median": with_plugin,
        "wall_s_all": walls["with_plugin"],
        "baseline_wall_s_median": baseline,
        "baseline_command": "pytest -p no:vllmqual -p no:cacheprovider --collect-only -q EMPTY_DIR",
        "plugin_share_s": with_plugin - baseline,
        "plugin_share_of_wall": (with_plugin - baseline) / with_plugin if with_plugin > 0 else None,
        "collected": collected.strip(),
        "plugin_import_s_median": _plugin_import_s(import_repeats),
    }


def _plugin_import_s(repeats: int = 5) -> float:
    """Seconds to import the plugin module once pytest itself is imported (fresh interpreter each)."""
    code = ("import time, pytest; t = time.perf_counter(); import pytest_vllmqual.plugin; "
            "print(time.perf_counter() - t)")
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sse", metavar="FILE", help="a recorded SSE body (default: synthetic, 256 tokens)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--transport", choices=("socket", "httpx"), default="socket",
                        help="socket: the live streaming path (default); httpx: httpx over MockTransport")
    parser.add_argument("--collect", action="store_true", help="also time pytest --collect-only")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    quick = QUICK_REPEATS if args.quick else {}
    events = split_sse_events(Path(args.sse).read_bytes()) if args.sse else synthetic_sse_events()
    results: dict[str, Any] = {
        "replay": measure_replay(events, repeats=quick.get("replay", args.repeats), transport=args.transport),
        "construction": measure_client_construction(repeats=quick.get("construction", 20))}
    print(f"QualClient construction: {results['construction']['construct_s_median'] * 1e3:.2f} ms (median)")
    replay = results["replay"]
    print(f"replay: {replay['data_chunks']} chunks, {replay['cpu_s_per_request_median'] * 1e3:.2f} ms CPU "
          f"per request, {replay['cpu_us_per_chunk']:.1f} µs CPU per chunk")
    if args.collect:
        results["collect"] = time_collect_only(repeats=quick.get("collect", 7),
                                               import_repeats=quick.get("collect", 5), warm=not args.quick)
        c = results["collect"]
        print(f"collect-only: {c['wall_s_median']:.3f} s wall (median of {c['repeats']}); bare pytest "
              f"{c['baseline_wall_s_median']:.3f} s; plugin import {c['plugin_import_s_median']:.3f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
