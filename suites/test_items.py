"""The item bank: questions with exact answers (arithmetic, recall, lists, a JSON field, a needle in
a long text, and an operator's own), answered greedily by every arm and kept in its sidecar. A
comparison judges two arms item by item; this gate records the answers and, per family, the accuracy
and the shares of answers that could not be parsed or ran out of tokens."""

from __future__ import annotations

import pytest

from pytest_vllmqual import GateRecorder, QualClient, Recipe, end_gate, items_gate

pytestmark = [pytest.mark.items]


@pytest.mark.gate("items")
def test_item_bank(qual_client: QualClient, recipe: Recipe, gate: GateRecorder) -> None:
    """Item bank: every item alone, greedy, the chat template as served."""
    verdict = items_gate(qual_client, recipe, gate)
    end_gate(verdict)
