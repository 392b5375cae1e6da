"""Gates of the fault-server session (reliability cases 10, 12, 24): broken streams, a transient
HTTP 500, then a server that logs its API key and dies.

Each stream gate asserts the SSE contract the way a real gate does (no violations, usage
present, [DONE] seen); the fault server breaks one rule per gate.
"""

from __future__ import annotations

import time

from support.gatekit import mark

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle


def _stream(client: QualClient, marker: str, label: str) -> StreamResult:
    body = {"messages": [{"role": "user", "content": f"Say ok. {marker}"}], "max_tokens": 8, "temperature": 0}
    return client.stream_chat(body, label=label)


def _assert_contract(result: StreamResult) -> None:
    assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"
    assert not result.violations, "stream contract broken: " + "; ".join(result.violations)
    assert result.attempt.ok


def test_stream_healthy(qual_client: QualClient, vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """Control: an intact stream from the same server passes the contract."""
    mark("handle", {"api_key": vllm_server.api_key, "pid": vllm_server.pid, "base_url": vllm_server.base_url})
    _assert_contract(_stream(qual_client, "", "healthy"))


def test_stream_cut_after_headers(qual_client: QualClient, gate: GateRecorder) -> None:
    """The stream breaks after the 200 headers."""
    _assert_contract(_stream(qual_client, "[fault:cut]", "cut"))


def test_stream_without_done(qual_client: QualClient, gate: GateRecorder) -> None:
    """The stream ends without the [DONE] terminator."""
    _assert_contract(_stream(qual_client, "[fault:nodone]", "no-done"))


def test_stream_without_usage(qual_client: QualClient, gate: GateRecorder) -> None:
    """The stream has no usage chunk although include_usage was sent."""
    _assert_contract(_stream(qual_client, "[fault:nousage]", "no-usage"))


def test_transient_500(qual_client: QualClient, gate: GateRecorder) -> None:
    """One request; the server answers HTTP 500 once. The gate must see it (retries: 0)."""
    body = {"messages": [{"role": "user", "content": "Say ok. [fault:500-once:t1]"}], "max_tokens": 8}
    result = qual_client.chat(body, label="transient")
    assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"


def test_same_request_after_500(qual_client: QualClient, gate: GateRecorder) -> None:
    """The same request again succeeds: the 500 was transient, so a hidden retry would have hidden it."""
    body = {"messages": [{"role": "user", "content": "Say ok. [fault:500-once:t1]"}], "max_tokens": 8}
    result = qual_client.chat(body, label="again")
    assert result.status_code == 200, f"HTTP {result.status_code}: {result.attempt.error}"


def test_server_dies(qual_client: QualClient, gate: GateRecorder) -> None:
    """The server logs the Authorization header and its VLLM_API_KEY, then exits mid-request."""
    body = {"messages": [{"role": "user", "content": "Say ok. [fault:die]"}], "max_tokens": 8}
    qual_client.chat(body, label="dies")


def test_after_death(qual_client: QualClient, gate: GateRecorder) -> None:
    """Ends at once as server_dead, with the (sanitized) log tail."""
    qual_client.chat({"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 8}, label="after")
    mark("after_death_ran", time.time())
