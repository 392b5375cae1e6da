"""Ask one server the same questions alone and at each load level: the answers of the floor under load.

A pass sends the probe's teacher-forced chunks and greedy prompts, then the chosen items, one at a
time, exactly as the probe and the item bank send them. The first pass is alone; each later pass
runs inside :class:`~.in_flight.InFlight`, which keeps the level's load requests in flight (the
load gate's exact prompts, ``ignore_eos``) and records how many were in flight as each measured
request was sent. The passes go into the arm's sidecar as the ``load_floor`` block, which
:mod:`.load_floor` turns into the floor per level.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.launch.base import ProgressFn

from .in_flight import InFlight
from .items.bank import Item
from .items.runner import answer_items
from .load_floor import FLOOR_VERSION, FloorSettings
from .probe import ProbeSettings, chunk_plan
from .runner import answer_chunks, answer_greedy, find_top_k, tokenize_text

__all__ = ["FloorQuestions", "run_floor"]


@dataclass(frozen=True)
class FloorQuestions:
    """What every pass asks: the probe (None: no probe), its greedy prompts, the items and their answer length."""

    probe: ProbeSettings | None
    greedy_prompts: Sequence[tuple[str, str]]
    items: Sequence[Item]
    item_max_tokens: int


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
              progress: ProgressFn, on_pass: Callable[[dict[str, Any]], object] | None = None) -> dict[str, Any]:
    """The ``load_floor`` block: a pass alone, then one per level with ``load_send(level, i)`` keeping
    ``level`` load requests in flight (``load_ok`` says whether one succeeded). ``on_pass`` gets the
    block as it stands after each pass, so a run stopped at its time limit keeps the levels it measured."""
    plan = _plan(client, questions.probe)
    alone = _one_pass(client, questions, plan, lambda: None)
    passes = [{"in_flight": 0, **alone, "load": None}]
    if on_pass is not None:
        on_pass(_block(settings, questions, plan, passes))
    progress(f"load floor: alone, {len(questions.items)} items, {len(alone['chunks'])} chunks, "
             f"{len(alone['greedy'])} greedy prompts in {alone['seconds']:.1f} s")
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
