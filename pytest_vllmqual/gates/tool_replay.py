"""The tool-call replay as a gate: each arm answers the same typed tool cases, one at a time unless
the recipe sets ``in_flight`` (the record says which).

Like the equivalence probe, the gate does not judge the arm: a comparison pairs two arms' answers
case by case (agreement, flips both ways, McNemar, non-inferiority). The gate passes when every
case was answered, records each answer as an :class:`ItemOutcome` (family ``tool_replay``) with
the call as the harness describes it (the tool named, the SHA-256 of its arguments, each schema
violation by path and kind: never the model's text), and leaves them as the ``tool_replay`` block
of the arm's sidecar. It also says whether this arm's accuracy lies in the range where a replay
can show a change (``informative``): a model that gets every case right cannot flip one the
other way.

A case is correct when the answer holds exactly one call, naming the expected tool, its arguments
valid against the tool's JSON schema and equal to the expected ones. ``parsed`` is False when no
call came back or its arguments are not JSON; ``hit_max_tokens`` when the answer ended at
``max_tokens``.

A recipe whose model cannot call tools declares the replay not applicable
(``gates.tool_replay.not_applicable``): it is not run (a hundred requests to prove a claim the
typed tools gate already checks), and a comparison of such an arm has no replay to judge.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.equivalence import TOOL_REPLAY_FAMILY as FAMILY
from pytest_vllmqual.equivalence import TOOL_REPLAY_KEY as SIDECAR_KEY
from pytest_vllmqual.equivalence import ItemOutcome, write_block
from pytest_vllmqual.equivalence import tool_replay_range as arm_range
from pytest_vllmqual.hashing import canonical_sha256, sha256_hex
from pytest_vllmqual.not_measured import not_measured
from pytest_vllmqual.recipe.model import Recipe

from .declared import declaration, not_run
from .in_flight import each_in_order, gate_in_flight
from .recorder import GateRecorder
from .tool_checks import auto_tool_choice, tool_call_problems
from .tool_fixtures import ToolCase
from .tool_replay_bank import DEFAULT_COUNT, DEFAULT_SEED, ReplayBank, ReplayCase, build_bank
from .verdict import GateVerdict, failed_request

__all__ = ["GATE_NAME", "JudgedCall", "judge_call", "replay_bank", "replay_in_flight", "tool_replay_gate"]

GATE_NAME = "tool_replay"


def _arguments_sha256(raw: Any) -> str | None:
    """The SHA-256 of a call's arguments: of their canonical JSON when they parse, else of the text."""
    if raw is None:
        return None
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return sha256_hex(str(raw))
    return canonical_sha256(value)


@dataclass(frozen=True)
class JudgedCall:
    """One case's answer, judged: the outcome and the call as the sidecar keeps it."""

    outcome: ItemOutcome
    call: dict[str, Any]


def judge_call(case_id: str, calls: Sequence[dict[str, Any]], fixture: ToolCase,
               finish_reason: str | None, completion_tokens: int | None = None) -> JudgedCall:
    """Judge one answer: exactly one call, the expected name, arguments valid and equal to the expected."""
    problems = tool_call_problems(list(calls), fixture, value_checks=True)
    first = (calls[0].get("function", calls[0]) if calls else {}) or {}
    raw = first.get("arguments")
    kinds = [p.kind for p in problems]
    parsed = bool(calls) and "not JSON" not in kinds
    name = first.get("name")
    record = {"item_id": case_id, "calls": len(calls),
              "name": name if name == fixture.name else (None if name is None else "(another tool)"),
              "arguments_sha256": _arguments_sha256(raw),
              "expected_sha256": _arguments_sha256(fixture.expected),
              "problems": [{"path": p.path, "kind": p.kind} for p in problems],
              "finish_reason": finish_reason, "completion_tokens": completion_tokens}
    outcome = ItemOutcome(case_id, FAMILY, correct=not problems, parsed=parsed,
                          hit_max_tokens=finish_reason == "length")
    return JudgedCall(outcome, record)


def replay_bank(recipe: Recipe, fixtures: Sequence[ToolCase]) -> ReplayBank:
    """The recipe's bank: ``gates.tool_replay`` (count, seed, max_tokens, tool_choice), else the typed
    tools gate's ``tool_choice`` and ``max_tokens``."""
    settings, tools = recipe.gate(GATE_NAME), recipe.gate("tools")
    return build_bank(fixtures, count=int(settings.get("count", DEFAULT_COUNT)),
                      seed=int(settings.get("seed", DEFAULT_SEED)),
                      tool_choice=str(settings.get("tool_choice", tools.get("tool_choice", "auto"))),
                      max_tokens=int(settings.get("max_tokens", tools.get("max_tokens", 256))))


def replay_in_flight(recipe: Recipe) -> int:
    """How many cases the replay keeps in flight (``gates.tool_replay.in_flight``, default 1: each case
    alone). Both arms of a comparison send the same way; more than one is for a server whose answers
    do not depend on the batch they share (the floor under load gate measures that)."""
    return gate_in_flight(recipe, GATE_NAME)


def _template_sha256(client: QualClient, bank: ReplayBank) -> str | None:
    """The SHA-256 of every case's token IDs as this server's chat template renders them (tools,
    system, effort included): two arms were asked the same tokens only when it matches."""
    rendered = []
    for case, body in zip(bank.cases, bank.requests(), strict=True):
        kwargs = body.get("chat_template_kwargs")
        result = client.tokenize_chat(body["messages"], tools=body["tools"], chat_template_kwargs=kwargs,
                                      label=f"replay-template-{case.case_id}")
        tokens = [int(t) for t in (result.body or {}).get("tokens") or []]
        if not result.ok or not tokens:
            return None
        rendered.append([case.case_id, tokens])
    return canonical_sha256(rendered)


def _ask(client: QualClient, recipe: Recipe, bank: ReplayBank, case: ReplayCase,
         body: dict[str, Any]) -> JudgedCall | GateVerdict:
    result = client.chat(body, label=f"replay-{case.case_id}")
    if result.status_code != 200:  # a request the server did not answer is never the model's answer
        return failed_request(result.attempt, recipe, auto_tools=auto_tool_choice(body["tool_choice"]),
                              what=f"tool-call replay case {case.case_id}: ")
    return judge_call(case.case_id, result.tool_calls, bank.by_name[case.tool], result.finish_reason,
                      result.completion_tokens)


def _ask_all(client: QualClient, recipe: Recipe, bank: ReplayBank,
             in_flight: int) -> tuple[list[JudgedCall], GateVerdict | None]:
    """The cases' answers in the bank's order, ``in_flight`` at a time, up to the first request the
    server did not answer, and that failure. After it no new case is sent (as one at a time stops there)."""
    stop = threading.Event()

    def ask(pair: tuple[ReplayCase, dict[str, Any]]) -> JudgedCall | GateVerdict | None:
        if stop.is_set():
            return None
        answer = _ask(client, recipe, bank, *pair)
        if isinstance(answer, GateVerdict):
            stop.set()
        return answer

    answers = each_in_order(ask, list(zip(bank.cases, bank.requests(), strict=True)), in_flight, "replay")
    judged: list[JudgedCall] = []
    for answer in answers:
        if not isinstance(answer, JudgedCall):
            break
        judged.append(answer)
    return judged, next((a for a in answers if isinstance(a, GateVerdict)), None)


def _by_shape(bank: ReplayBank, judged: Sequence[JudgedCall]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for case, one in zip(bank.cases, judged, strict=True):
        counts = shapes.setdefault(case.shape, [0, 0])
        counts[0] += int(one.outcome.correct)
        counts[1] += 1
    return dict(sorted(shapes.items()))


def tool_replay_gate(client: QualClient, recipe: Recipe, gate: GateRecorder,
                     tool_fixtures: Sequence[ToolCase]) -> GateVerdict:
    """Ask every replay case once (``in_flight`` at a time) and keep the judged answers, in the bank's order,
    for the sidecar."""
    reason = declaration(recipe, GATE_NAME)
    if reason is not None:
        return gate.ended(not_run(recipe, gate, reason, "the replay's requests would only repeat what the typed "
                                                        "tools gate measures of this claim"))
    if not tool_fixtures:
        why = not_measured("the recipe has no typed tools to replay")
        gate.summary(why)
        return gate.ended(GateVerdict(skip_reason=why))
    bank = replay_bank(recipe, tool_fixtures)
    described = bank.describe()
    gate.threshold(count=len(bank.cases), useful_range=[0.2, 0.8])
    started = time.monotonic()
    described["chat_template_sha256"] = _template_sha256(client, bank)
    described["in_flight"] = in_flight = replay_in_flight(recipe)
    judged, failure = _ask_all(client, recipe, bank, in_flight)
    if failure is not None:
        gate.measure(bank_sha256=bank.sha256, answered=len(judged), count=len(bank.cases))
        return gate.ended(failure)
    seconds = round(time.monotonic() - started, 3)
    return gate.ended(_recorded(gate, bank, described, judged, seconds))


def _recorded(gate: GateRecorder, bank: ReplayBank, described: dict[str, Any], judged: Sequence[JudgedCall],
              seconds: float) -> GateVerdict:
    outcomes = [one.outcome for one in judged]
    span = arm_range(outcomes)
    unparsed = sum(1 for o in outcomes if not o.parsed)
    at_limit = sum(1 for o in outcomes if o.hit_max_tokens)
    block = {"bank": described, **span, "not_parsed": unparsed, "hit_max_tokens": at_limit,
             "outcomes": [o.to_dict() for o in outcomes], "calls": [one.call for one in judged],
             "seconds": seconds}
    write_block(gate.private_dir, SIDECAR_KEY, block)
    shapes = _by_shape(bank, judged)
    gate.measure(bank_name=described["name"], bank_version=described["version"], bank_sha256=bank.sha256,
                 chat_template_sha256=described["chat_template_sha256"], count=len(outcomes),
                 correct=span["correct"], accuracy=span["accuracy"], informative=span["informative"],
                 informative_reason=span["informative_reason"], not_parsed=unparsed, hit_max_tokens=at_limit,
                 by_shape=shapes, replay_seconds=seconds, in_flight=described["in_flight"],
                 sidecar_block=SIDECAR_KEY)
    said = "" if span["informative"] else "; outside the useful range 20-80%: a comparison cannot tell arms apart on it"
    gate.summary(f"{span['correct']}/{len(outcomes)} cases correct ({(span['accuracy'] or 0) * 100:.1f}%) in "
                 f"{seconds:.1f} s{said}")
    return GateVerdict()
