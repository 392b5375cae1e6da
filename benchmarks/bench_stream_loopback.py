"""Benchmark: the streaming client's CPU per chunk over a real socket, beside vLLM bench's client.

    python -m benchmarks.bench_stream_loopback [--concurrency 1,4,8] [--interval-ms 1.8] [--tokens 256]
    python -m benchmarks.bench_stream_loopback --reference-client REV   # also the client of git revision REV
    python -m benchmarks.bench_stream_loopback --quick [--json PATH]   # c=1 and 2, short streams, no vLLM client

The replay in ``bench_client.py`` has no socket, so it leaves out what dominates a live
stream: one ``recv`` per chunk, the HTTP/1.1 chunked framing and a thread wake-up per chunk.
Here a paced SSE server in its own process (asyncio, one HTTP chunk per SSE event, vLLM 0.32's
chunk format, as uvicorn sends them) streams to

- the harness: ``QualClient.stream_chat`` from a thread pool of ``c`` workers, ``2c`` requests,
  as ``fidelity_chunk_rate.chunk_rate_sweep`` runs it;
- vLLM bench's client: vLLM's own ``async_request_openai_chat_completions`` on an aiohttp
  session configured as ``vllm bench serve`` configures it, ``2c`` requests at most ``c`` at a
  time, in its own process;

and each client's process CPU over its requests, divided by the chunks it received, is its
CPU per chunk. The server's CPU is in another process and counts for neither. The live
figure (a real vLLM server, the same comparison) is ``bench_fidelity``'s chunk-rate sweep.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.bench_client import _Sink, synthetic_sse_events
from benchmarks.quick_mode import QUICK_SKIP_VLLM, add_quick_flag, quick_note
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.launch.base import ServerHandle

ROOT = Path(__file__).resolve().parent.parent

MODEL = "tiny-chat"


# -- the paced SSE server (its own process) -------------------------------------------------


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, events: list[bytes],
                            interval_s: float) -> None:
    """Answer every POST on one keep-alive connection with the paced SSE body."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            await writer.drain()
            next_at = time.monotonic()
            for event in events:
                next_at += interval_s
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(port_file: Path, tokens: int, interval_s: float) -> None:
    """Run the server until killed; the bound port is written to ``port_file``."""
    events = synthetic_sse_events(completion_tokens=tokens, prompt_tokens=128)

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _serve_connection(r, w, events, interval_s),
                                            "127.0.0.1", 0)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- the two clients --------------------------------------------------------------------------


def body() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "x " * 64}], "max_tokens": 256, "temperature": 0,
            "ignore_eos": True}


def harness_run(base_url: str, concurrency: int, requests: int, *, client_class: type[QualClient] = QualClient, label: str = "harness") -> dict[str, Any]:
    """``requests`` streams through QualClient, ``concurrency`` threads, as the chunk-rate sweep runs them."""
    handle = ServerHandle(base_url=base_url, served_model_name=MODEL, launcher_kind="external")
    client = client_class(handle, timeout_s=60.0, sink=_Sink())
    client.stream_chat(body(), label="warm")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda _: client.stream_chat(body(), label="rate"), range(requests)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    client.close()
    chunks = sum(r.chunks for r in results)
    failed = [r.attempt.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"harness streams failed: {failed[:3]}")
    return {"tool": label, "concurrency": concurrency, "requests": requests, "chunks": chunks, "wall_s": wall,
            "cpu_s": cpu, "chunks_per_s": chunks / wall, "cpu_us_per_chunk": cpu / chunks * 1e6,
            "core_fraction": cpu / wall}


def vllm_client_run(base_url: str, concurrency: int, requests: int) -> dict[str, Any]:
    """The same through vLLM bench's request function and session settings (run in a child process)."""
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_chat_completions,
    )

    async def run() -> dict[str, Any]:
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=300,
                                         use_dns_cache=True, keepalive_timeout=60, enable_cleanup_closed=True,
                                         force_close=False, ssl=False)
        session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                        timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))
        sem = asyncio.Semaphore(concurrency)
        request = RequestFuncInput(prompt="x " * 64, api_url=f"{base_url}/v1/chat/completions", prompt_len=128,
                                   output_len=256, model=MODEL, ignore_eos=True,
                                   extra_body={"temperature": 0})

        async def one() -> Any:
            async with sem:
                return await async_request_openai_chat_completions(request, session)

        await one()  # warm-up, as vllm bench's initial test prompt
        cpu0, wall0 = time.process_time(), time.perf_counter()
        outputs = await asyncio.gather(*(one() for _ in range(requests)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        await session.close()
        failed = [o.error for o in outputs if not o.success]
        if failed:
            raise RuntimeError(f"vllm bench client failed: {failed[:1]}")
        # Chunks with choices (the first, then one per ITL) plus the usage chunk: the data
        # chunks the harness counts ([DONE] is counted by neither).
        chunks = sum(len(o.itl) + 1 for o in outputs) + requests
        return {"tool": "vllm_bench_client", "concurrency": concurrency, "requests": requests, "chunks": chunks,
                "wall_s": wall, "cpu_s": cpu, "chunks_per_s": chunks / wall, "cpu_us_per_chunk": cpu / chunks * 1e6,
                "core_fraction": cpu / wall}

    return asyncio.run(run())


# -- driver -----------------------------------------------------------------------------------


def start_server(tokens: int, interval_s: float, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "port"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_stream_loopback", "--serve", str(port_file),
                             "--tokens", str(tokens), "--interval-ms", str(interval_s * 1e3)], cwd=ROOT)
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("loopback SSE server did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    return proc, f"http://127.0.0.1:{port}"


def _line(row: dict[str, Any]) -> str:
    return (f"{row['tool']:<18} c={row['concurrency']}: {row['chunks_per_s']:6.0f} chunks/s, "
            f"{row['cpu_us_per_chunk']:5.1f} µs CPU per chunk, {row['core_fraction'] * 100:5.1f}% of one core")


def measure(concurrencies: Sequence[int], *, tokens: int, interval_s: float, vllm: bool, workdir: Path,
            reference_revision: str | None = None) -> list[dict[str, Any]]:
    proc, base_url = start_server(tokens, interval_s, workdir)
    rows = []
    clients: list[tuple[str, type[QualClient]]] = [("harness", QualClient)]
    if reference_revision is not None:
        from benchmarks.fidelity_chunk_rate import client_at_revision

        clients.append((f"harness@{reference_revision}", client_at_revision(reference_revision)))
    try:
        for c in concurrencies:
            for label, client_class in clients:
                rows.append(harness_run(base_url, c, 2 * c, client_class=client_class, label=label))
                print(_line(rows[-1]), flush=True)
            if vllm:
                out = subprocess.run([sys.executable, "-m", "benchmarks.bench_stream_loopback", "--vllm-client", base_url,
                                      "--concurrency", str(c)], cwd=ROOT, capture_output=True, text=True, check=True)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(_line(rows[-1]), flush=True)
    finally:
        proc.kill()
        proc.wait()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,8", help="comma-separated concurrencies (default 1,4,8)")
    parser.add_argument("--tokens", type=int, default=256, help="token chunks per stream (default 256)")
    parser.add_argument("--interval-ms", type=float, default=1.8,
                        help="gap between one stream's chunks (default 1.8 ms: ~4,400 chunks/s at c=8)")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM bench's client")
    parser.add_argument("--reference-client", metavar="REV",
                        help="also run QualClient as committed at git revision REV (before/after in one run)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--vllm-client", metavar="BASE_URL", help=argparse.SUPPRESS)
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        # Its own paced server stands in for vLLM here already; quick mode only shortens the run.
        args.concurrency, args.tokens, args.interval_ms, args.no_vllm = "1,2", 16, 0.2, True
        quick_note(QUICK_SKIP_VLLM)
    if args.serve:
        serve(Path(args.serve), args.tokens, args.interval_ms / 1e3)
        return 0
    if args.vllm_client:
        print(json.dumps(vllm_client_run(args.vllm_client, int(args.concurrency), 2 * int(args.concurrency))))
        return 0
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"vllmqual-loopback-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    rows = measure([int(c) for c in args.concurrency.split(",")], tokens=args.tokens,
                   interval_s=args.interval_ms / 1e3, vllm=not args.no_vllm, workdir=workdir,
                   reference_revision=args.reference_client)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    workdir.joinpath("port").unlink(missing_ok=True)
    workdir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
