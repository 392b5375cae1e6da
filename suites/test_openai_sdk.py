"""The real client: chat, a streamed tool call and the Responses API through the official
``openai`` SDK, the way users' applications call the server (the SDK as shipped: lenient
parsing, no retries). The raw-HTTP gates time and keep the evidence; this gate proves an
application gets what it reads. Strict validation against the SDK's models runs too: each
deviation is a named finding, and fails the gate only with ``gates.openai_sdk.strict: true``."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, Recipe, ServerHandle, end_gate, openai_sdk_gate

pytestmark = [pytest.mark.functional]


@pytest.mark.gate("openai_sdk")
def test_openai_sdk(vllm_server: ServerHandle, recipe: Recipe, gate: GateRecorder) -> None:
    """openai SDK: chat, a streamed tool call and a Responses answer give an application what it reads."""
    verdict = openai_sdk_gate(vllm_server, recipe, gate)
    end_gate(verdict)
