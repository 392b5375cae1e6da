"""Reasoning prompt contract: per-effort prompt-token fingerprints (the reference campaign's
"6/85/98")."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, QualClient, Recipe, end_gate, reasoning_fingerprints_gate

pytestmark = [pytest.mark.reasoning]


@pytest.mark.gate("reasoning_fingerprints")
def test_reasoning_fingerprints(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Each effort's prompt-token count, from usage and /tokenize, equals its pinned fingerprint."""
    verdict = reasoning_fingerprints_gate(qual_client, recipe, gate)
    end_gate(verdict)
