"""Smoke: one short chat completion proves the served model answers, finishing as the recipe allows."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, QualClient, Recipe, smoke_gate

pytestmark = [pytest.mark.functional]


@pytest.mark.gate("smoke")
def test_smoke(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Smoke: a short chat completion finishes with content and usage."""
    verdict = smoke_gate(qual_client, recipe, gate)
    assert verdict.passed, verdict.failure
