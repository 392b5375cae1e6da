"""Gates of the real-server hang session (reliability cases 9, and 14 by SIGTERM).

A smoke passes; then a gate SIGSTOPs TP worker 1 and sends a request, which the per-request
deadline must end as ``hung``; the next gates must end at once as ``hung``. The last test
waits for the outer test to SIGTERM this pytest process.
"""

from __future__ import annotations

import os
import signal
import time

from support.gatekit import describe_tree, mark, shm_files_held_by, tp_workers

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle

SMOKE = {"messages": [{"role": "user", "content": "Say cloud."}], "max_tokens": 8, "temperature": 0}


def test_smoke_before_hang(qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """A smoke passes before the worker is stopped."""
    result = qual_client.chat(SMOKE, label="smoke")
    assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"


def test_worker_stopped_mid_run(qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """SIGSTOP TP worker 1, then send a request: the deadline must end it as hung."""
    assert vllm_server.pid is not None
    workers = tp_workers(vllm_server.pid)
    assert len(workers) == 2, describe_tree(vllm_server.pid)
    tree = describe_tree(vllm_server.pid)
    os.kill(workers[1], signal.SIGSTOP)
    mark("stopped", {"pid": workers[1], "at": time.time(), "tree": tree,
                     "shm": shm_files_held_by([row["pid"] for row in tree]), "api_key": vllm_server.api_key})
    try:
        qual_client.chat(SMOKE, label="while-stopped")
    finally:
        mark("stopped_gate_ended", time.time())


def test_after_hang_chat(qual_client: QualClient, gate: GateRecorder) -> None:
    """Ends at once as hung."""
    qual_client.chat(SMOKE, label="after-hang")


def test_after_hang_stream(qual_client: QualClient, gate: GateRecorder) -> None:
    """Ends at once as hung."""
    qual_client.stream_chat(SMOKE, label="after-hang-stream")


def test_zz_wait_for_sigterm() -> None:
    """Not a gate: keeps pytest busy until the outer test sends SIGTERM (Ctrl-C's cousin)."""
    mark("waiting_for_sigterm", time.time())
    time.sleep(600)
