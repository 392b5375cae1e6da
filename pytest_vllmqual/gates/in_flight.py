"""Gates that may send their cases several at a time: the recipe's setting, and the sending.

``gates.<gate>.in_flight`` (default 1: each case alone, as an operator asks them). More only where the
server's answers do not depend on the batch they share, as the floor under load gate measures.
Whatever the setting, the answers come back in the cases' order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pytest_vllmqual.recipe.model import Recipe

__all__ = ["each_in_order", "gate_in_flight"]

Case = TypeVar("Case")
Answer = TypeVar("Answer")


def gate_in_flight(recipe: Recipe, gate: str) -> int:
    """How many of ``gate``'s cases are sent at once (``gates.<gate>.in_flight``, default 1)."""
    return max(1, int(recipe.gate(gate).get("in_flight", 1)))


def each_in_order(ask: Callable[[Case], Answer], cases: Sequence[Case], in_flight: int, name: str) -> list[Answer]:
    """``ask`` for every case, ``in_flight`` at a time (threads named ``vllmqual-<name>``), the answers in
    the cases' order whatever order they came back in."""
    if in_flight == 1:
        return [ask(case) for case in cases]
    with ThreadPoolExecutor(in_flight, thread_name_prefix=f"vllmqual-{name}") as pool:
        return list(pool.map(ask, cases))
