"""Tool-call replay: the typed tool prompts asked again under seeded tool lists, system messages and
reasoning efforts, one case at a time, with the server to itself (a greedy answer can change with
the batch it ran in). A comparison pairs two arms' answers case by case; this gate only records
them, and says whether this arm's accuracy leaves room for flips both ways."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, QualClient, Recipe, end_gate, recipe_tool_fixtures, tool_replay_gate

pytestmark = [pytest.mark.equivalence]


@pytest.mark.gate("tool_replay")
def test_tool_replay(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Tool-call replay: every case answered; the answers kept for the sidecar's tool_replay block."""
    verdict = tool_replay_gate(qual_client, recipe, gate, recipe_tool_fixtures(recipe))
    end_gate(verdict)  # skipped when declared not applicable, or without typed tools
