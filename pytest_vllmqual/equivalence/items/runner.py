"""Ask one server the bank, one item at a time, greedy, and keep every answer for the sidecar.

Each item is one chat request with the user prompt alone, ``temperature: 0``, the bank's
``max_tokens`` and the probe's stop rules (none but the model's own end-of-sequence token), sent
alone like the probe's greedy prompts: answers can change with batch composition. The chat template
is fingerprinted as the server renders the first prompt of each family (``/tokenize``), and is part
of the bank's hash. An HTTP error on an item ends the run with a ValueError naming the item; a server
that dies ends it with ``ServerGoneError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient

from ..outcomes import ItemOutcome
from ..probe import GREEDY_STOP_RULES
from ..runner import chat_template_fingerprint
from .bank import Bank, Item
from .judges import judge
from .score import family_summaries

__all__ = ["BankRun", "answer_items", "run_bank"]


@dataclass
class BankRun:
    """What one arm answered: the sidecar's ``items`` block, its outcomes and how long it took."""

    body: dict[str, Any]
    outcomes: list[ItemOutcome]
    seconds: float


def answer_items(client: QualClient, items: Sequence[Item], max_tokens: int,
                 before_each: Callable[[], object] | None = None) -> tuple[list[ItemOutcome], list[dict[str, Any]]]:
    """Send each item alone (greedy), judge its answer; ``before_each`` runs before every request."""
    outcomes: list[ItemOutcome] = []
    answers: list[dict[str, Any]] = []
    for item in items:
        body = {"messages": [{"role": "user", "content": item.prompt}], "max_tokens": max_tokens,
                "temperature": 0, **GREEDY_STOP_RULES}
        if before_each is not None:
            before_each()
        result = client.chat(body, label=f"items-{item.item_id}")
        if not result.ok:
            raise ValueError(f"item {item.item_id} failed: {result.attempt.error or result.status_code}")
        text = result.content
        judged = judge(item.judge, text, item.answer)
        outcomes.append(ItemOutcome(item.item_id, item.family, judged.correct, judged.parsed,
                                    result.finish_reason == "length"))
        answers.append({"item_id": item.item_id, "family": item.family, "grade": item.grade,
                        "judge": item.judge.value, "expected": item.answer, "text": text,
                        "finish_reason": result.finish_reason, "completion_tokens": result.completion_tokens})
    return outcomes, answers


def run_bank(client: QualClient, bank: Bank) -> BankRun:
    """Send every item of ``bank`` and judge each answer."""
    started = time.perf_counter()
    firsts = {item.family: item for item in reversed(bank.items)}
    template = chat_template_fingerprint(client, [(item.item_id, item.prompt) for item in bank.items
                                                  if firsts[item.family] is item])
    outcomes, answers = answer_items(client, bank.items, bank.settings.max_tokens)
    settings = bank.settings
    summaries = family_summaries(outcomes, max_unparsed_pct=settings.max_unparsed_pct,
                                 max_hit_max_tokens_pct=settings.max_hit_max_tokens_pct)
    seconds = round(time.perf_counter() - started, 3)
    body = {"bank": bank.record(template.get("rendered_sha256")), "outcomes": [o.to_dict() for o in outcomes],
            "answers": answers, "families": summaries, "seconds": seconds, "sent_in_flight": 0,
            "chat_template": {k: v for k, v in template.items() if k != "prompt_tokens"}}
    return BankRun(body, outcomes, seconds)
