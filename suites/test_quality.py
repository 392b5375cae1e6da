"""Repeated quality checks reported as k/N (the seeds' "intelligence 2 checks × 3/3; session
recall 3/3; tools 3/3; 32K context pass"). A check the recipe declares not applicable is
reported as skipped with the recipe's reason, never as passed."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.gates.checks import (
    ToolFixture,
    check_tool_call,
    load_tool_fixtures,
    recipe_tool_fixtures_path,
)
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.layout import fixtures_dir
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.quality]

CHECKS_FILE = fixtures_dir() / "quality" / "checks.yaml"
CHECKS: dict[str, Any] = yaml.safe_load(CHECKS_FILE.read_text())


def _skip_if_not_applicable(recipe: Recipe, gate: GateRecorder, check: str) -> None:
    reasons: dict[str, str] = recipe.gate("quality").get("not_applicable") or {}
    reason = reasons.get(check) or reasons.get(check.split("[")[0].split(".")[0])
    if reason:
        gate.summary("not applicable")
        pytest.skip(f"not applicable to recipe {recipe.name}: {reason}")


def _repeat(recipe: Recipe) -> int:
    return int(recipe.gate("quality").get("repeat", 3))


def _effort_body(recipe: Recipe) -> dict[str, Any]:
    effort = recipe.gate("quality").get("reasoning_effort")
    return {"reasoning_effort": effort} if effort else {}


def _run_repeated(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, label: str,
                  messages: list[dict[str, Any]], expect: str, max_tokens: int = 32) -> None:
    n = _repeat(recipe)
    answers: list[str] = []
    passed = 0
    for i in range(n):
        result = qual_client.chat({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                                   **_effort_body(recipe)}, label=f"{label}-{i + 1}")
        answer = result.content if result.status_code == 200 else f"HTTP {result.status_code}"
        answers.append(answer)
        if result.status_code == 200 and re.search(expect, answer, re.IGNORECASE):
            passed += 1
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, answers_distinct=len(set(answers)))
    gate.threshold(required=f"{n}/{n}")
    assert passed == n, f"{label}: {passed}/{n} answers matched /{expect}/; answers: {answers}"


@pytest.mark.gate("quality_intelligence")
@pytest.mark.parametrize("check", CHECKS["intelligence"], ids=lambda c: c["name"])
def test_quality_intelligence(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                              check: dict[str, Any]) -> None:
    """Intelligence: a known-answer question at the recipe's reasoning effort, k/N."""
    _skip_if_not_applicable(recipe, gate, "intelligence")
    _run_repeated(qual_client, recipe, gate, check["name"], [{"role": "user", "content": check["prompt"]}],
                  check["expect"])


@pytest.mark.gate("quality_session_recall")
@pytest.mark.parametrize("check", CHECKS["session_recall"], ids=lambda c: c["name"])
def test_quality_session_recall(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                                check: dict[str, Any]) -> None:
    """Session recall: a fact from the first turn is recalled turns later, k/N."""
    _skip_if_not_applicable(recipe, gate, "session_recall")
    _run_repeated(qual_client, recipe, gate, check["name"], list(check["turns"]), check["expect"])


@pytest.mark.gate("quality_tools")
def test_quality_tools(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Tools, repeated: the same typed call is made correctly every time, k/N."""
    _skip_if_not_applicable(recipe, gate, "tools")
    fixtures: list[ToolFixture] = load_tool_fixtures(
        recipe_tool_fixtures_path(recipe.gate("tools").get("fixtures"), recipe.project_root))
    fixture = fixtures[1 % len(fixtures)]
    n = _repeat(recipe)
    passed, problems_seen = 0, []
    for i in range(n):
        result = qual_client.chat({"messages": [{"role": "user", "content": fixture.prompt}],
                                   "tools": [f.openai_tool() for f in fixtures], "tool_choice": "auto",
                                   "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0,
                                   **_effort_body(recipe)}, label=f"quality-tool-{i + 1}")
        problems = (check_tool_call(result.tool_calls, fixture, value_checks=False)
                    if result.status_code == 200 else [f"HTTP {result.status_code}"])
        passed += not problems
        problems_seen += problems
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, tool=fixture.name)
    assert passed == n, f"tools {passed}/{n}: {'; '.join(problems_seen)}"


@pytest.mark.gate("quality_long_context")
def test_quality_long_context(qual_client: QualClient, recipe: Recipe, gate: GateRecorder, progress: Any) -> None:
    """Long context at an exact prompt length, k/N: in "needle" mode a fact at the start is recalled
    at the end; in "smoke_after_filler" mode the smoke prompt is answered after filler (no recall)."""
    _skip_if_not_applicable(recipe, gate, "long_context")
    from pytest_vllmqual.client.prompts import ChatShape, ExactPromptBuilder, new_nonce
    from pytest_vllmqual.client.token_counters import ServerTokenCounter

    spec = CHECKS["long_context"]
    settings = recipe.gate("quality")
    target = int(settings.get("long_context_tokens", 32768))
    effort = settings.get("reasoning_effort")
    mode = settings.get("long_context_check", "needle")
    if mode == "smoke_after_filler":
        # For models without a copy skill: the long prompt must not break the answer to the smoke prompt.
        question, expect, system = recipe.gate("smoke").get("prompt", "Say cloud."), spec["smoke_expect"], None
    else:
        question, expect, system = spec["question"], spec["expect"], spec["needle"]
    shape = ChatShape(question=question, system_prompt=system, reasoning_effort=effort)
    builder = ExactPromptBuilder(ServerTokenCounter(qual_client.http, qual_client.model))
    n = _repeat(recipe)
    passed, answers, sizes = 0, [], []
    # Built before the first request: calibration between requests would wait out the server's
    # post-step busy-poll (docs/PERFORMANCE.md).
    prompts = [builder.build(target, shape, nonce=new_nonce(f"long-{i}")) for i in range(n)]
    for i, prompt in enumerate(prompts):
        progress(f"long-context check {i + 1}/{n}: {prompt.measured_tokens:,} prompt tokens")
        result = qual_client.chat({**prompt.request_fields(), "max_tokens": 32, "temperature": 0},
                                  label=f"long-context-{i + 1}")
        sizes.append(result.prompt_tokens)
        answer = result.content if result.status_code == 200 else f"HTTP {result.status_code}"
        answers.append(answer)
        passed += result.status_code == 200 and bool(re.search(expect, answer, re.IGNORECASE))
    gate.summary(f"{passed}/{n} at {target:,} tokens ({mode.replace('_', ' ')})")
    gate.measure(passed=passed, repeat=n, target_tokens=target, prompt_tokens=sizes, check=mode)
    assert passed == n, f"long context ({mode}) {passed}/{n} at {target:,} tokens matched /{expect}/; answers: {answers}"
