"""The floor under load: the probe's chunks and greedy prompts and the first items of each family,
asked alone and again while the load gate's own prompts keep each load level in flight, on one
server. A comparison reads the answers (how far this server's answers move under load); this gate
only records them, and is not applicable to a recipe without load levels."""

from __future__ import annotations

import pytest

from pytest_vllmqual import (
    GateRecorder,
    ProgressFn,
    QualClient,
    Recipe,
    ToolCase,
    end_gate,
    load_floor_gate,
    recipe_tool_fixtures,
)

pytestmark = [pytest.mark.load_floor]


@pytest.mark.gate("load_floor")
def test_load_floor(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: ProgressFn) -> None:
    """Floor under load: the same questions alone and at each load level, every answer kept."""
    tools: list[ToolCase] = recipe_tool_fixtures(recipe)
    verdict = load_floor_gate(qual_client, recipe, gate, tools, progress=progress)
    end_gate(verdict)
