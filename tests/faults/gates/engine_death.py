"""Gates of the engine-death session: the engine dies during a streamed request.

Fault server: a real vLLM dies this way only on a GPU kernel fault (measured with 0.24.0 on
2x H200), which cannot be caused on demand; the server replays that death's log lines and its
error event inside the 200 stream, then exits.
"""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.recorder import GateRecorder


def test_request_that_kills_the_engine(qual_client: QualClient, gate: GateRecorder) -> None:
    """The streamed request in flight when the engine died."""
    body = {"messages": [{"role": "user", "content": "Say ok. [fault:engine-dies]"}], "max_tokens": 8}
    qual_client.stream_chat(body, label="killer")


def test_startup_facts_after_the_death(server_facts: dict[str, Any], gate: GateRecorder) -> None:
    """Facts gathered at startup are still there to judge after the server died."""
    assert server_facts["cold_start_s"] is not None and server_facts["cold_start_s"] > 0
    gate.summary(f"cold start {server_facts['cold_start_s']:.1f} s, judged after the death")


def test_request_after_the_death(qual_client: QualClient, gate: GateRecorder) -> None:
    """Ends at once as server_dead."""
    qual_client.chat({"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 8}, label="after")
