"""Repeated quality checks reported as k/N (the reference campaign's "intelligence 2 checks ×
3/3; session recall 3/3; tools 3/3; 32K context pass"). A check the recipe declares not
applicable still runs when it is cheap: failing, it is reported as skipped with the recipe's
reason and what was measured, never as passed; passing, it passes and the record says the
declaration no longer holds."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vllmqual import (
    GateRecorder,
    ProgressFn,
    QualClient,
    Recipe,
    end_gate,
    long_context_gate,
    quality_checks,
    quality_tools_gate,
    repeated_check_gate,
)

pytestmark = [pytest.mark.quality]


@pytest.mark.gate("quality_intelligence")
@pytest.mark.parametrize("check", quality_checks("intelligence"), ids=lambda c: c["name"])
def test_quality_intelligence(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                              check: dict[str, Any]) -> None:
    """Intelligence: a known-answer question at the recipe's reasoning effort, k/N."""
    verdict = repeated_check_gate(qual_client, recipe, gate, "intelligence", check)
    end_gate(verdict)


@pytest.mark.gate("quality_session_recall")
@pytest.mark.parametrize("check", quality_checks("session_recall"), ids=lambda c: c["name"])
def test_quality_session_recall(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                                check: dict[str, Any]) -> None:
    """Session recall: a fact from the first turn is recalled turns later, k/N."""
    verdict = repeated_check_gate(qual_client, recipe, gate, "session_recall", check)
    end_gate(verdict)


@pytest.mark.gate("quality_tools")
def test_quality_tools(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Tools, repeated: the same typed call, the right tool with schema-valid arguments every time, k/N."""
    verdict = quality_tools_gate(qual_client, recipe, gate)
    end_gate(verdict)


@pytest.mark.gate("quality_long_context")
def test_quality_long_context(qual_client: QualClient, recipe: Recipe, gate: GateRecorder,
                              progress: ProgressFn) -> None:
    """Long context at an exact prompt length, k/N: in "needle" mode a fact at the start is recalled
    at the end; in "smoke_after_filler" mode the smoke prompt is answered after filler (no recall)."""
    verdict = long_context_gate(qual_client, recipe, gate, progress=progress)
    end_gate(verdict)
