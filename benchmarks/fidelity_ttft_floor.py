"""The clients' own share of TTFT: both tools against a server that answers at once."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import httpx

from benchmarks.fidelity_common import build_prompts, harness_pass, median_known, vllm_bench_pass
from pytest_vllmqual.client.prompts import ExactPromptBuilder
from pytest_vllmqual.launch.base import ServerHandle


class _NullChatHandler(http.server.BaseHTTPRequestHandler):
    """Answers every chat request at once with a role chunk, one token, usage and [DONE]."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the body waits for the client's delayed ACK (40 ms)
    BODY = b"".join(
        b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        for event in (
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat",
             "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "length"}]},
            {"id": "null", "object": "chat.completion.chunk", "created": 0, "model": "tiny-chat", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        )
    ) + b"data: [DONE]\n\n"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.BODY)))
        self.end_headers()
        self.wfile.write(self.BODY)

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def client_ttft_floor(builder: ExactPromptBuilder, *, tokens: int, n: int, tokenizer: str, workdir: Path,
                      private_dir: Path, vllm_bench: bool = True) -> dict[str, Any]:
    """TTFT of both tools against a server that answers instantly: what each client's clock adds.

    The same exact-length prompts (so the same request sizes) go to an in-process HTTP server
    that sends the whole one-token stream the moment the request body is read. Whatever TTFT
    a tool reports there is its own request-building, sending and parsing time.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NullChatHandler)
    thread = threading.Thread(target=server.serve_forever, name="bench-null-server", daemon=True)
    thread.start()
    try:
        handle = ServerHandle(base_url=f"http://127.0.0.1:{server.server_address[1]}",
                              served_model_name="tiny-chat", launcher_kind="external")
        null_http = httpx.Client(base_url=handle.base_url)
        prompts = build_prompts(builder, tokens, n, "null")
        ours = harness_pass(handle, prompts, concurrency=1, max_tokens=1, private_dir=private_dir,
                            label="null-harness", metrics_http=null_http)
        theirs = vllm_bench_pass(handle, prompts, concurrency=1, max_tokens=1, tokenizer=tokenizer,
                                 workdir=workdir, label="null-vllm", metrics_http=null_http) if vllm_bench else None
        null_http.close()
    finally:
        server.shutdown()
        server.server_close()
    h = median_known([r.ttft_s for r in ours.requests])
    v = median_known([r.ttft_s for r in theirs.requests]) if theirs is not None else None
    return {"requests": n, "prompt_tokens": tokens, "harness_median_ttft_ms": h * 1e3 if h is not None else None,
            "vllm_bench_median_ttft_ms": v * 1e3 if v is not None else None,
            "difference_ms": (h - v) * 1e3 if h is not None and v is not None else None}
