"""Gates of the issue-13 canary session: each one makes the real server produce text that
carries planted identifiers, and fails, so that text would reach the junit file, the report
and the HTML if anything copied server text into them.

Run in file order after the engine suite and the smoke: a request naming a model that does not
exist (vLLM echoes the name in its 404), a request over the context limit (a known template,
re-rendered from its numbers), then a SIGKILL of the API server and a gate that finds it dead
(whose failure once carried the log tail).
"""

from __future__ import annotations

import os
import signal
import time

from support.gatekit import mark

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle

PLANTED_MODEL = os.environ.get("CANARY_MODEL_NAME", "db7.prod.acme-internal-model")
SAY = [{"role": "user", "content": "Say cloud."}]


def test_unknown_model_is_refused(qual_client: QualClient, gate: GateRecorder) -> None:
    """vLLM's 404 names the requested model: that name is planted, so the text must stay private."""
    result = qual_client.chat({"model": PLANTED_MODEL, "messages": SAY, "max_tokens": 4}, label="unknown-model")
    mark("unknown_model", {"status": result.status_code, "error": result.attempt.error})
    from pytest_vllmqual.vllm.server_messages import public_failure

    assert result.status_code == 200, public_failure(result.attempt)


def test_over_the_context_limit(qual_client: QualClient, gate: GateRecorder) -> None:
    """A known vLLM template: quoted publicly only as re-rendered numbers."""
    # vLLM 0.32 clamps an oversized max_tokens; a prompt over max_model_len (32,768) is refused.
    over = [{"role": "user", "content": "hello " * 40_000}]
    result = qual_client.chat({"messages": over, "max_tokens": 4}, label="over-limit")
    mark("over_limit", {"status": result.status_code, "error": result.attempt.error})
    from pytest_vllmqual.vllm.server_messages import public_failure

    assert result.status_code == 200, public_failure(result.attempt)


def test_kill_the_api_server(vllm_server: ServerHandle, gate: GateRecorder) -> None:
    """SIGKILL the API server's process group, and wait until it is gone."""
    assert vllm_server.pid is not None
    os.killpg(vllm_server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(vllm_server.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    mark("killed", {"pid": vllm_server.pid})


def test_after_the_kill(qual_client: QualClient, gate: GateRecorder) -> None:
    """The server is dead: this gate fails as server_dead (its failure once carried the log tail)."""
    result = qual_client.chat({"messages": SAY, "max_tokens": 4}, label="after-kill")
    assert result.status_code == 200
