"""Load: the concurrency levels the configuration is promoted for, each sustained by a closed
loop, against per-request SLOs (goodput), plus an optional search for the highest level at SLO
(`-m load`).

A measurement: the plugin holds the traffic lock exclusively for `load` gates, so nothing else
runs against the server while a level is measured."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, ProgressFn, QualClient, Recipe, end_gate, load_gate

pytestmark = [pytest.mark.load]


@pytest.mark.gate("load")
def test_load(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: ProgressFn) -> None:
    """Load at SLO: every promoted level, sustained, meets min_goodput_pct of its SLOs with no errors."""
    verdict = load_gate(qual_client, recipe, gate, progress=progress)
    end_gate(verdict)
