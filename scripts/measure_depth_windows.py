"""Measure the depth probe's method against whole-prompt log probabilities on one real vLLM server.

Usage: python scripts/measure_depth_windows.py --model DIR [--max-model-len 8192] [--windows 16]
       [--window-tokens 16] [--out tests/data/depth-window-equality.json]

It starts vLLM (the module form, prefix caching on, eager, one rank on the CPU), tokenizes the
package's probe text, and scores the same positions twice:

- whole prompt: one ``/v1/completions`` request over the first ``max_model_len - 1`` tokens with
  ``prompt_logprobs: K`` (vLLM skips reading the prefix cache for such a request and computes the
  log probabilities of every position over the whole vocabulary at once);
- windowed: the depth probe's own method (``pytest_vllmqual.equivalence.depth``): per scored
  position p, a one-token request over the first p tokens with ``logprobs: K``, the text's token
  forced by ``allowed_token_ids`` (the raw log probabilities are taken before that mask), the
  prefix read from the cache.

It writes, sanitized (token IDs and log probabilities, no text, no host names): per window the
positions as both methods scored them, the figures of one method against the other
(top-1 agreement, ln PPL ratio, KL lower bound), the largest difference of the scored token's
log probability, the time per window and the server's resident memory (sum over its process
tree, sampled every 20 ms) before and at the peak of each phase, and the prefix-cache counters.
``tests/unit/equivalence/test_depth_evidence.py`` reads the file.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from pytest_vllmqual.equivalence.depth import DepthWindow, score_window
from pytest_vllmqual.equivalence.figures import chunk_sums
from pytest_vllmqual.equivalence.probe import parse_prompt_positions, probe_text
from pytest_vllmqual.hashing import canonical_json

TOP_K = 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RssSampler:
    """The peak resident memory of a process tree, sampled in a thread while a phase runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        total = 0
        try:
            root = psutil.Process(self.pid)
            for proc in [root, *root.children(recursive=True)]:
                try:
                    total += int(proc.memory_info().rss)
                except psutil.Error:
                    continue
        except psutil.Error:
            return 0
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.02)

    def __enter__(self) -> RssSampler:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _metrics(client: httpx.Client) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total"):
            if line.startswith(name):
                out[name.split(":")[1]] = out.get(name.split(":")[1], 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _start(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
           "VLLM_USE_AOT_COMPILE": "0"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
               "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
               "--max-model-len", str(args.max_model_len), "--max-num-seqs", "8",
               "--max-num-batched-tokens", str(args.max_model_len), "--enforce-eager", "--enable-prefix-caching",
               "--dtype", args.dtype]
    return subprocess.Popen(command, env=env, stdout=open(args.log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_ready(client: httpx.Client, proc: subprocess.Popen[bytes], deadline_s: float = 300) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with {proc.returncode}; see the log")
        try:
            if client.get("/health", timeout=2).status_code == 200:
                return time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("vLLM was not ready in time")


def _post(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def _window_starts(length: int, windows: int, width: int) -> list[int]:
    """Window starts spread evenly over the prompt, the first at 64 tokens of context."""
    first, last = 64, length - width
    return [first + round(i * (last - first) / (windows - 1)) for i in range(windows)]


def _compare(whole: list[list[Any]], windowed: list[list[Any]]) -> dict[str, Any]:
    sums = chunk_sums({"length": 0, "positions": whole}, {"length": 0, "positions": windowed})
    diffs = [abs(a[1] - b[1]) for a, b in zip(whole, windowed, strict=True)]
    return {"positions": sums.n, "top1_agreement": sums.agree / sums.n, "ln_ppl_ratio": sums.ln_ratio / sums.n,
            "kl_lower_bound": sums.kl / sums.n, "max_abs_logprob_diff": max(diffs)}


def measure(args: argparse.Namespace, client: httpx.Client, pid: int) -> dict[str, Any]:
    text = probe_text().text[: args.max_model_len * 8]
    tokens = [int(t) for t in client.post("/tokenize", json={"model": "m", "prompt": text,
                                                            "add_special_tokens": False}).json()["tokens"]]
    tokens = tokens[: args.max_model_len - 1]
    record: dict[str, Any] = {"prompt_tokens": len(tokens), "top_k": TOP_K}
    before = _metrics(client)
    with RssSampler(pid) as rss:
        started = time.perf_counter()
        body = _post(client, {"model": "m", "prompt": tokens, "max_tokens": 1, "temperature": 0,
                              "prompt_logprobs": TOP_K})
        seconds = time.perf_counter() - started
        baseline = rss.peak
    after = _metrics(client)
    entries = body["choices"][0]["prompt_logprobs"]
    whole = parse_prompt_positions(entries, tokens, 1, TOP_K)
    record["whole_prompt"] = {"seconds": round(seconds, 3), "rss_before_bytes": baseline, "rss_peak_bytes": rss.peak,
                              "response_bytes": len(json.dumps(body)),
                              "prefix_cache": {k: after.get(k, 0) - before.get(k, 0) for k in after}}
    starts = _window_starts(len(tokens), args.windows, args.window_tokens)
    windows: list[dict[str, Any]] = []
    before = _metrics(client)
    with RssSampler(pid) as rss:
        started = time.perf_counter()
        for start in starts:
            t0 = time.perf_counter()
            window = DepthWindow(0, start, args.window_tokens)
            scored = score_window(lambda b: _post(client, {"model": "m", **b}), tokens, window, TOP_K)
            mine = whole[start - 1: start - 1 + args.window_tokens]
            windows.append({"depth": start, "seconds": round(time.perf_counter() - t0, 3), "whole": mine,
                            "windowed": scored, **_compare(mine, scored)})
        total = time.perf_counter() - started
        baseline = rss.peak
    after = _metrics(client)
    record["windowed"] = {"seconds": round(total, 3), "windows": len(windows), "window_tokens": args.window_tokens,
                          "seconds_per_window": round(total / len(windows), 3),
                          "rss_before_bytes": baseline, "rss_peak_bytes": rss.peak,
                          "prefix_cache": {k: after.get(k, 0) - before.get(k, 0) for k in after}}
    all_whole = [p for w in windows for p in w["whole"]]
    all_windowed = [p for w in windows for p in w["windowed"]]
    record["agreement"] = _compare(all_whole, all_windowed)
    record["windows"] = windows
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--window-tokens", type=int, default=16)
    parser.add_argument("--dtype", default="bfloat16", help="the served dtype (a second arm: float32)")
    parser.add_argument("--log", default="/tmp/measure_depth_windows.log")
    parser.add_argument("--out", default="tests/data/depth-window-equality.json")
    args = parser.parse_args()
    port = _free_port()
    proc = _start(args, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            ready = _wait_ready(client, proc)
            version = client.get("/version").json().get("version")
            record = measure(args, client, proc.pid)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
    config = json.loads((Path(args.model) / "config.json").read_text())
    record = {"format": "vllmqual-depth-window-equality/1", "runtime_version": version,
              "model": {"architecture": (config.get("architectures") or ["?"])[0], "vocab": config.get("vocab_size"),
                        "layers": config.get("num_hidden_layers")},
              "serve": {"max_model_len": args.max_model_len, "max_num_batched_tokens": args.max_model_len,
                        "prefix_caching": True, "enforce_eager": True, "kv_cache_space_gib": 1,
                        "dtype": args.dtype},
              "ready_seconds": round(ready, 1), "command": " ".join(["python", "scripts/measure_depth_windows.py",
                                                                     "--model", "MODEL_DIR", *sys.argv[3:]]),
              **record}
    Path(args.out).write_text(canonical_json(record) + "\n")
    summary = {k: record[k] for k in ("prompt_tokens", "whole_prompt", "agreement")}
    summary["windowed"] = record["windowed"]
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
