"""The functional preflight after smoke: JSON, N/N typed tools, streaming tool, tool-result
continuation and the Responses API (with test_smoke.py, the reference campaign's "6/6")."""

from __future__ import annotations

import pytest

from pytest_vllmqual import (
    GateRecorder,
    QualClient,
    Recipe,
    ToolCase,
    end_gate,
    json_gate,
    recipe_tool_fixtures,
    responses_gate,
    shipped_tool_fixtures,
    streaming_tool_gate,
    tool_continuation_gate,
    tools_gate,
)

pytestmark = [pytest.mark.functional]


@pytest.fixture(scope="session", autouse=True)
def _shipped_tools_read_once() -> list[ToolCase]:
    """The shipped typed tools, read once for the session before the first of these gates: read
    between requests, they would wait for the CPU that the server's busy-poll holds
    (docs/PERFORMANCE.md)."""
    return shipped_tool_fixtures()


@pytest.fixture
def tool_fixtures(recipe: Recipe) -> list[ToolCase]:
    return recipe_tool_fixtures(recipe)


@pytest.mark.gate("json")
def test_json(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """JSON: response_format json_schema; content parses, validates, finish_reason stop."""
    verdict = json_gate(qual_client, recipe, gate)
    assert verdict.passed, verdict.failure


@pytest.mark.gate("tools")
def test_tools(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
               tool_fixtures: list[ToolCase]) -> None:
    """Typed tools N/N: every tool called by name with schema-valid arguments, every one of the
    ``gates.tools.repeat`` times it is asked (default once)."""
    verdict = tools_gate(qual_client, recipe, gate, tool_fixtures)
    end_gate(verdict)


@pytest.mark.gate("streaming_tool")
def test_streaming_tool(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                        tool_fixtures: list[ToolCase]) -> None:
    """Streaming tool: deltas reassemble into one valid call; [DONE] and a usage chunk arrive."""
    verdict = streaming_tool_gate(qual_client, recipe, gate, tool_fixtures)
    end_gate(verdict)


@pytest.mark.gate("tool_continuation")
def test_tool_continuation(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                           tool_fixtures: list[ToolCase]) -> None:
    """Tool-result continuation: after the tool's result the model answers and does not call again."""
    verdict = tool_continuation_gate(qual_client, recipe, gate, tool_fixtures)
    end_gate(verdict)


@pytest.mark.gate("responses")
def test_responses(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                   tool_fixtures: list[ToolCase]) -> None:
    """Responses API at the recipe's reasoning effort, with a function-call round trip if enabled."""
    verdict = responses_gate(qual_client, recipe, gate, tool_fixtures)
    end_gate(verdict)
