"""The item bank as a gate: every arm answers the same questions with exact answers, and keeps them.

Like the equivalence probe, the gate does not judge the arm: a comparison does, item by item over
two arms' answers (on the same bank hash), and drift and fleets read the same record. It passes when
the bank was answered and at least one family is measured; a family whose answers mostly could not
be parsed, or mostly ran out of tokens, is ``not measured`` with the reason (the recipe's caps), and
a bank with no measured family is skipped as not measured. Accuracy per family is recorded, with a
note where it is near 0 or 100%: such a family cannot tell two arms apart for that model, which is
expected for the fixture model and is no failure. An HTTP error on an item fails the gate; a server
that dies under it is recorded with the item in flight.

It runs after the cheap gates and before the probe and the ladder (``session.gate_order``): its
prompts are short, except the needle family's, whose passages are the longest prompts a gate sends
before the probe; they cost KV cache only (no prompt log probabilities), within the engine's budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.equivalence import BLOCKS_DIR, BankSettings, build_bank, run_bank, write_block
from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.not_measured import not_measured
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import FailureKind

from .recorder import GateRecorder
from .verdict import GateVerdict

SIDECAR_KEY = "items"
"""The item bank's block in the arm's sidecar (a comparison reads ``items.bank`` and ``items.outcomes``)."""

__all__ = ["GATE_NAME", "items_gate", "items_summary"]

GATE_NAME = "items"


def items_summary(families: list[dict[str, Any]]) -> str:
    """One clause per family: ``arithmetic 41.7% (25/60; unparsed 0.0%, at max_tokens 3.3%)``, or why not measured."""
    parts = []
    for row in families:
        shares = f"unparsed {row['unparsed_pct']:.1f}%, at max_tokens {row['hit_max_tokens_pct']:.1f}%"
        if not row["measured"]:
            parts.append(f"{row['family']} {row['reason']}")
        else:
            near = " (near 0: cannot tell arms apart for this model)" if row["accuracy_pct"] <= 10 else ""
            parts.append(f"{row['family']} {row['accuracy_pct']:.1f}% ({row['correct']}/{row['items']}; "
                         f"{shares}){near}")
    return "; ".join(parts)


def items_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Answer the bank and keep the answers in the private folder for the report's sidecar."""
    try:
        settings = BankSettings.from_recipe(recipe.gate(GATE_NAME), recipe.serve.max_model_len, recipe.project_root)
        bank = build_bank(settings)
    except (ValueError, OSError) as exc:
        return GateVerdict(failure=f"gates.items: {exc}", kind=FailureKind.CONFIG)
    gate.threshold(max_unparsed_pct=settings.max_unparsed_pct, max_hit_max_tokens_pct=settings.max_hit_max_tokens_pct,
                   max_tokens=settings.max_tokens, counts=settings.to_dict()["families"], seed=settings.seed)
    if settings.dropped_needle_tokens:
        gate.measure(dropped_needle_tokens=list(settings.dropped_needle_tokens))
    if not bank.items:
        reason = "the bank holds no item (gates.items: every count is 0 and no operator file)"
        gate.summary(not_measured(reason))
        return GateVerdict(skip_reason=not_measured(reason))
    try:
        run = run_bank(client, bank)
    except ServerGoneError:
        gate.server_gone(client.last_attempt, "died_under_items")
        raise
    except ValueError as exc:
        return GateVerdict(failure=f"the item bank failed: {exc}", kind=FailureKind.SERVER_ERROR)
    body = run.body
    write_block(Path(gate.private_dir), SIDECAR_KEY, body)
    bank_record = body["bank"]
    gate.measure(bank_sha256=bank_record["sha256"], items_sha256=bank_record["items_sha256"],
                 bank_version=bank_record["version"], items=len(run.outcomes), families=body["families"],
                 items_seconds=run.seconds, sidecar=f"{BLOCKS_DIR}/{SIDECAR_KEY}.json")
    summary = f"{len(run.outcomes)} items in {run.seconds:.1f} s: {items_summary(body['families'])}"
    gate.summary(summary)
    if not any(row["measured"] for row in body["families"]):
        return GateVerdict(skip_reason=not_measured(f"no family of the item bank is measured: "
                                                    f"{items_summary(body['families'])}"))
    return GateVerdict()
