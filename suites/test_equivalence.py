"""Output equivalence: the probe each arm of a comparison answers (log probabilities of a fixed
text and greedy answers), with the server to itself. An A/B comparison judges two arms' answers;
this gate only records them (a run without a comparison is not judged by it)."""

from __future__ import annotations

import pytest

from pytest_vllmqual import (
    GateRecorder,
    QualClient,
    Recipe,
    ToolCase,
    equivalence_gate,
    recipe_tool_fixtures,
)

pytestmark = [pytest.mark.equivalence]


@pytest.mark.gate("equivalence")
def test_equivalence_probe(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Equivalence probe: teacher-forced chunks with prompt log probabilities, then greedy answers."""
    tools: list[ToolCase] = recipe_tool_fixtures(recipe)
    verdict = equivalence_gate(qual_client, recipe, gate, tools)
    if verdict.skip_reason:
        pytest.skip(verdict.skip_reason)
    assert verdict.passed, verdict.failure
