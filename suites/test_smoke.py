"""Smoke: one short chat completion proves the served model answers and stops."""

from __future__ import annotations

import pytest

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.checks import run_smoke
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.privacy.public_text import public_failure
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.functional]


@pytest.mark.gate("smoke")
def test_smoke(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Smoke: a short chat completion finishes with content and usage."""
    settings = recipe.gate("smoke")
    smoke = run_smoke(qual_client, recipe, label="smoke")
    result = smoke.chat
    assert result.status_code == 200, f"smoke returned {public_failure(result.attempt)}"
    gate.measure(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                 latency_s=round(result.attempt.latency_s or 0.0, 4),
                 finish_reason=result.finish_reason)
    assert result.finish_reason == "stop", (
        f"smoke finished with {result.finish_reason!r}, not 'stop': the model did not end its answer "
        f"within {smoke.max_tokens} tokens")
    assert result.content.strip(), "smoke returned empty content"
    assert (result.prompt_tokens or 0) > 0 and (result.completion_tokens or 0) > 0, (
        f"smoke usage is incomplete: {result.usage}")
    expected = settings.get("expect_substring")
    if expected:
        assert expected.lower() in result.content.lower(), f"smoke answer {result.content!r} lacks {expected!r}"
    gate.summary("pass")
