"""Why SmolLM2's forced one-token requests (the depth probe's) generated token 0 on GPU vLLM 0.24.0.

Boots SmolLM2 from fixtures/model/build (the smollm2-gpu recipe's folder) on port 8011, with prefix
caching and then without, and prints the answer to one-token /v1/completions requests over the first
p tokens of a repeated text at several depths p: with the text's token forced by allowed_token_ids,
without forcing, forced without return_tokens_as_token_ids, with a second allowed token, at
temperature 1, forced with neutral penalties set in the request, and forced by a logit_bias of +100
instead (the depth probe's ``depth_force: logit_bias``); then the server log's lines on sampling
defaults. Run on the GPU host from the repo root with the bundle on PYTHONPATH:

    python3 scripts/gpu/forced_token_diagnosis.py > forced-token-diagnosis.txt

Its output of 2026-12-06 (an H100) is
reports/examples/gpu-tp1/answers-2026-12-06/smollm2-three-layers/forced-token-diagnosis.txt.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx

MODEL = "fixtures/model/build/smollm2-135m-instruct"
PORT = 8011
URL = f"http://127.0.0.1:{PORT}"


def boot(extra: list[str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--served-model-name",
           "smollm2", "--max-model-len", "8192", "--enforce-eager", "--port", str(PORT), "--host", "127.0.0.1",
           "--gpu-memory-utilization", "0.5", *extra]
    log = open(f"/tmp/diag-{len(extra)}.log", "w")  # the server writes to it until it ends
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if httpx.get(URL + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit("no boot")


def post(body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(URL + "/v1/completions", json={"model": "smollm2", **body}, timeout=120)
    if r.status_code != 200:
        return {"status": r.status_code, "text": r.text[:400]}
    c = r.json()["choices"][0]
    lp = c.get("logprobs") or {}
    top = (lp.get("top_logprobs") or [None])[0] or {}
    return {"text": c.get("text"), "finish": c.get("finish_reason"), "tokens": lp.get("tokens"),
            "token_logprobs": lp.get("token_logprobs"), "top": dict(list(top.items())[:5])}


def run(label: str) -> None:
    text = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
            "foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 20
    tokens = httpx.post(URL + "/tokenize", json={"model": "smollm2", "prompt": text}, timeout=30).json()["tokens"]
    print(f"== {label}: {len(tokens)} tokens; first {tokens[:8]}", flush=True)
    for depth in (126, 127, 10, 400):
        t = tokens[depth]
        for name, extra in (("allowed+ids", {"allowed_token_ids": [t], "return_tokens_as_token_ids": True}),
                            ("no-allowed+ids", {"return_tokens_as_token_ids": True}),
                            ("allowed-noids", {"allowed_token_ids": [t]}),
                            ("allowed-two", {"allowed_token_ids": [t, 13], "return_tokens_as_token_ids": True}),
                            ("allowed-temp1", {"allowed_token_ids": [t], "return_tokens_as_token_ids": True,
                                               "temperature": 1.0}),
                            ("allowed-neutral", {"allowed_token_ids": [t], "return_tokens_as_token_ids": True,
                                                 "repetition_penalty": 1.0, "frequency_penalty": 0.0,
                                                 "presence_penalty": 0.0}),
                            ("bias100", {"logit_bias": {str(t): 100}, "return_tokens_as_token_ids": True})):
            body = {"prompt": tokens[:depth], "max_tokens": 1, "temperature": 0, "logprobs": 5, **extra}
            print(depth, t, name, json.dumps(post(body)), flush=True)
    # the probe's own text, as the depth probe sends it: a chat-free prompt of token IDs from the start
    body = {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0, "logprobs": 3}
    print("plain", json.dumps(post(body)), flush=True)


def sampling_lines(extra: list[str]) -> None:
    """The server log's lines on sampling defaults and the sampler (a generation config's overrides)."""
    with open(f"/tmp/diag-{len(extra)}.log", encoding="utf-8", errors="replace") as log:
        for line in log:
            if any(word in line.lower() for word in ("sampling", "generation config", "sampler", "logits")):
                print("log:", line.rstrip()[-300:], flush=True)


for extra, label in (([], "default"), (["--no-enable-prefix-caching"], "no-prefix-cache")):
    p = boot(extra)
    try:
        run(label)
    finally:
        p.terminate()
        p.wait(60)
        time.sleep(3)
    sampling_lines(extra)
