"""Gates for ``pytest -n 2`` (reliability case 22): functional gates that may run in
parallel on both workers, and capacity gates that must run alone.

Each gate records the wall-clock window of its traffic and the worker it ran on as
measurements, so the merged report itself shows whether a measurement overlapped other
traffic. Each also notes the server it was handed (pid, address) for the outer test.
"""

from __future__ import annotations

import os
import time

import pytest
from support.gatekit import mark

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle

TRAFFIC = {"messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 32, "ignore_eos": True,
           "temperature": 0}
"""32 decoded tokens per request, ``REQUESTS`` per gate: a gate's traffic lasts seconds, long enough
that gates on the two workers overlap in time."""
REQUESTS = 3
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "controller")


def _traffic(client: QualClient, server: ServerHandle, gate: GateRecorder, requests: int, label: str) -> None:
    mark(f"server-{label}", {"worker": WORKER, "pid": server.pid, "base_url": server.base_url})
    start = time.time()
    for i in range(requests):
        result = client.chat(TRAFFIC, label=f"{label}-{i}")
        assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"
    gate.measure(window_start=start, window_end=time.time(), worker=WORKER)


@pytest.mark.functional
@pytest.mark.parametrize("n", range(6))
def test_parallel_traffic(n: int, qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """Functional traffic: may share the server with other functional gates."""
    _traffic(qual_client, vllm_server, gate, REQUESTS, f"parallel-{n}")


@pytest.mark.capacity
@pytest.mark.parametrize("n", range(2))
def test_measurement_traffic(n: int, qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """A measurement: holds the traffic lock exclusively, so nothing else talks to the server."""
    _traffic(qual_client, vllm_server, gate, REQUESTS, f"measurement-{n}")
