"""Ask one server the same questions alone and at each load level: the answers of the floor under load.

A pass sends the probe's teacher-forced chunks and greedy prompts, then the chosen items, one at a
time, exactly as the probe and the item bank send them. The first pass is alone; when the probe and
the item bank already asked this server every one of those questions alone in this run (the same
chunk tokens, ``top_k``, greedy prompts, item list and answer length), their recorded answers are
that pass instead of asking again (:class:`RecordedAnswers`). Each later pass
runs inside :class:`~.in_flight.InFlight`, which keeps the level's load requests in flight (the
load gate's exact prompts, ``ignore_eos``) and records how many were in flight as each measured
request was sent. The passes go into the arm's sidecar as the ``load_floor`` block, which
:mod:`.load_floor` turns into the floor per level.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.hashing import sha256_hex
from pytest_vllmqual.launch.base import ProgressFn

from .in_flight import InFlight
from .items.bank import Item
from .items.runner import answer_items
from .load_floor import FLOOR_VERSION, FloorSettings
from .probe import ProbeSettings, chunk_plan
from .runner import answer_chunks, answer_greedy, find_top_k, tokenize_text

__all__ = ["FloorQuestions", "RecordedAnswers", "run_floor"]


@dataclass(frozen=True)
class FloorQuestions:
    """What every pass asks: the probe (None: no probe), its greedy prompts, the items and their answer length."""

    probe: ProbeSettings | None
    greedy_prompts: Sequence[tuple[str, str]]
    items: Sequence[Item]
    item_max_tokens: int


@dataclass(frozen=True)
class RecordedAnswers:
    """What this server already answered alone in this run: the probe's body (``chunk_tokens``,
    ``top_k``, ``chunks``, ``greedy``) and the item bank's block, None where that gate did not run;
    ``items_sha256`` is the hash of the bank the floor's items come from, to match the block's."""

    probe: Mapping[str, Any] | None
    items: Mapping[str, Any] | None
    items_sha256: str | None


@dataclass(frozen=True)
class _Plan:
    chunks: list[tuple[int, list[int]]]
    top_k: int


def _plan(client: QualClient, probe: ProbeSettings | None) -> _Plan | None:
    if probe is None or not probe.context_lengths:
        return None
    tokens = tokenize_text(client, probe.text().text, probe.tokens_needed)
    top_k, refusal = find_top_k(client, tokens, probe.top_k)
    return None if refusal is not None else _Plan(chunk_plan(tokens[:probe.tokens_needed], probe), top_k)


def _one_pass(client: QualClient, questions: FloorQuestions, plan: _Plan | None,
              mark: Callable[[], object]) -> dict[str, Any]:
    """Every question once, ``mark`` before each request; the answers as the sidecar keeps them."""
    started = time.perf_counter()
    chunks: list[dict[str, Any]] = []
    greedy: list[dict[str, Any]] = []
    if plan is not None and questions.probe is not None:
        for chunk in plan.chunks:
            mark()
            chunks += answer_chunks(client, [chunk], plan.top_k)
        for prompt in questions.greedy_prompts:
            mark()
            greedy += answer_greedy(client, [prompt], plan.top_k, questions.probe.greedy_max_tokens)
    outcomes, answers = answer_items(client, questions.items, questions.item_max_tokens, before_each=mark)
    return {"chunks": chunks, "greedy": greedy, "outcomes": [o.to_dict() for o in outcomes], "answers": answers,
            "seconds": round(time.perf_counter() - started, 3)}


def _recorded_probe(questions: FloorQuestions, plan: _Plan | None,
                    body: Mapping[str, Any] | None) -> tuple[list[Any], list[Any]] | None:
    """The probe's chunks and greedy answers when ``body`` asked exactly the questions of ``plan``."""
    if plan is None or questions.probe is None:
        return [], []
    if not body:
        return None
    same = (body.get("chunk_tokens") == [ids for _, ids in plan.chunks] and body.get("top_k") == plan.top_k
            and (body.get("parameters") or {}).get("greedy_max_tokens") == questions.probe.greedy_max_tokens
            and [(g.get("id"), g.get("prompt_sha256")) for g in body.get("greedy") or []]
            == [(name, sha256_hex(prompt)) for name, prompt in questions.greedy_prompts])
    return (list(body.get("chunks") or []), list(body.get("greedy") or [])) if same else None


def _recorded_items(questions: FloorQuestions, recorded: RecordedAnswers) -> tuple[list[Any], list[Any]] | None:
    """The bank's outcomes and answers for the floor's items, in their order, when the block answered
    the same bank's items at the same answer length."""
    if not questions.items:
        return [], []
    bank = (recorded.items or {}).get("bank") or {}
    if recorded.items_sha256 is None or bank.get("items_sha256") != recorded.items_sha256 \
            or bank.get("max_tokens") != questions.item_max_tokens:
        return None
    outcomes = {o.get("item_id"): o for o in (recorded.items or {}).get("outcomes") or []}
    answers = {a.get("item_id"): a for a in (recorded.items or {}).get("answers") or []}
    wanted = [item.item_id for item in questions.items]
    if not all(item_id in outcomes and item_id in answers for item_id in wanted):
        return None
    return [outcomes[i] for i in wanted], [answers[i] for i in wanted]


def recorded_alone(questions: FloorQuestions, plan: _Plan | None, recorded: RecordedAnswers) -> dict[str, Any] | None:
    """The alone pass from answers recorded earlier in this run, or None when any question was not."""
    probe, items = _recorded_probe(questions, plan, recorded.probe), _recorded_items(questions, recorded)
    if probe is None or items is None:
        return None
    return {"chunks": probe[0], "greedy": probe[1], "outcomes": items[0], "answers": items[1], "seconds": 0.0,
            "recorded_by": ["equivalence", "items"]}


def _block(settings: FloorSettings, questions: FloorQuestions, plan: _Plan | None,
           passes: list[dict[str, Any]]) -> dict[str, Any]:
    """The sidecar block: the settings, the probe's plan, the items asked and every pass so far."""
    probe = None
    if plan is not None and questions.probe is not None:
        probe = {"top_k": plan.top_k, "greedy_max_tokens": questions.probe.greedy_max_tokens,
                 "context_lengths": list(questions.probe.context_lengths),
                 "chunks_per_length": questions.probe.chunks_per_length}
    return {"version": FLOOR_VERSION, "settings": settings.to_dict(), "probe": probe,
            "items": {"item_ids": [item.item_id for item in questions.items], "max_tokens": questions.item_max_tokens},
            "passes": list(passes)}


def run_floor(client: QualClient, settings: FloorSettings, questions: FloorQuestions,
              load_send: Callable[[int, int], Any], *, load_ok: Callable[[Any], bool],
              progress: ProgressFn, on_pass: Callable[[dict[str, Any]], object] | None = None,
              recorded: RecordedAnswers | None = None) -> dict[str, Any]:
    """The ``load_floor`` block: a pass alone (``recorded``'s answers when they cover every question),
    then one per level with ``load_send(level, i)`` keeping ``level`` load requests in flight
    (``load_ok`` says whether one succeeded). ``on_pass`` gets the block as it stands after each
    pass, so a run stopped at its time limit keeps the levels it measured."""
    plan = _plan(client, questions.probe)
    alone = recorded_alone(questions, plan, recorded) if recorded is not None else None
    asked = alone is None
    if alone is None:
        alone = _one_pass(client, questions, plan, lambda: None)
    passes = [{"in_flight": 0, **alone, "load": None}]
    if on_pass is not None:
        on_pass(_block(settings, questions, plan, passes))
    how = f"in {alone['seconds']:.1f} s" if asked else "as the probe and the item bank answered them in this run"
    progress(f"load floor: alone, {len(questions.items)} items, {len(alone['chunks'])} chunks, "
             f"{len(alone['greedy'])} greedy prompts {how}")
    for level in settings.levels:
        with InFlight(level, functools.partial(load_send, level), load_ok) as load:
            loaded = _one_pass(client, questions, plan, load.mark)
        passes.append({"in_flight": level, **loaded, "load": load.figures.to_dict()})
        if on_pass is not None:
            on_pass(_block(settings, questions, plan, passes))
        figures = load.figures.to_dict()
        progress(f"load floor: {level} in flight, {loaded['seconds']:.1f} s, {figures['load_requests']} load "
                 f"requests, {figures['sends_at_full_level']}/{figures['sends']} sends at the full level")
    return _block(settings, questions, plan, passes)
