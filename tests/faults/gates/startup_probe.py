"""Gates for startup faults (reliability cases 1-7): two ordinary gates that need the server.

The fixture notes the moment the plugin gave up on the server, so the outer test can
compare it with the moment the fault happened. The gate bodies note that they ran: after
a failed startup they must not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.gatekit import mark

from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle


@pytest.fixture
def timed_server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    try:
        handle: ServerHandle = request.getfixturevalue("vllm_server")
    finally:
        mark("noticed_at", time.time())
    yield handle


def test_first_gate(timed_server: ServerHandle, gate: GateRecorder) -> None:
    """The first gate that needs the server (it starts it)."""
    mark("first_gate_ran", time.time())


def test_second_gate(vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """A second gate: the failed start is remembered, not retried."""
    mark("second_gate_ran", time.time())
