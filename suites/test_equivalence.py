"""Output equivalence: the probe each arm of a comparison answers (log probabilities of a fixed
text and greedy answers), with the server to itself. An A/B comparison judges two arms' answers;
this gate only records them (a run without a comparison is not judged by it)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual import (
    GateRecorder,
    QualClient,
    Recipe,
    ServerHandle,
    ToolCase,
    end_gate,
    equivalence_gate,
    recipe_tool_fixtures,
    server_memory,
)

pytestmark = [pytest.mark.equivalence]


@pytest.mark.gate("equivalence")
def test_equivalence_probe(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, vllm_server: ServerHandle,
                           server_facts: dict[str, Any]) -> None:
    """Equivalence probe: teacher-forced chunks with prompt log probabilities, then greedy answers,
    each chunk sized to the memory the server has outside its KV budget."""
    tools: list[ToolCase] = recipe_tool_fixtures(recipe)
    memory = server_memory(vllm_server.pid, server_facts.get("engine"), None)
    verdict = equivalence_gate(qual_client, recipe, gate, tools, memory)
    end_gate(verdict)
