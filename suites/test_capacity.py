"""Capacity: the exact-length context ladder, the largest actual prompt, post-probe smokes,
the max_model_len + 1 rejection, the server-side cross-check and concurrency (`-m capacity`).

Measurements run alone: the plugin holds the traffic lock exclusively for `capacity` gates."""

from __future__ import annotations

import pytest

from pytest_vllmqual import (
    GateRecorder,
    ProgressFn,
    QualClient,
    Recipe,
    concurrency_gate,
    end_gate,
    ladder_gate,
)

pytestmark = [pytest.mark.capacity]


@pytest.mark.gate("ladder")
def test_ladder(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: ProgressFn) -> None:
    """Ladder: every rung exact (calibration error 0), answered, followed by a passing smoke."""
    verdict = ladder_gate(qual_client, recipe, gate, progress=progress)
    end_gate(verdict)


@pytest.mark.gate("concurrency")
def test_concurrency(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: ProgressFn) -> None:
    """Concurrency: N requests sent at once complete; per-request and aggregate figures, preemptions."""
    verdict = concurrency_gate(qual_client, recipe, gate, progress=progress)
    assert verdict.passed, verdict.failure
