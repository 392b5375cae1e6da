"""The gates that judge the model's answers, one function per gate: the reasoning prompt
contract (per-effort prompt-token fingerprints) and the repeated quality checks reported as
k/N (known-answer questions, session recall, a repeated tool call, long context).

A quality check the recipe declares not applicable (``gates.quality.not_applicable``) still
runs when it is cheap and is judged against the declaration (``gates.declared``); the
long-context check, a full prefill per request, is skipped with the recipe's reason. Each
function writes its gate's measurements and summary and returns a ``GateVerdict``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from pytest_vllmqual.client.prompts import ChatShape, ExactPromptBuilder, new_nonce
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.token_counters import ServerTokenCounter
from pytest_vllmqual.errors import CalibrationError
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.layout import fixtures_dir
from pytest_vllmqual.privacy.public_text import quote_answers
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import Attempt, FailureKind, worst_failure
from pytest_vllmqual.vllm.server_messages import public_failure

from .declared import declaration, judged, not_run, quality_declaration
from .number_answer import check_fingerprints, judge_final_number
from .recorder import GateRecorder
from .smoke import SMOKE_PROMPT
from .tool_checks import check_tool_call
from .tool_fixtures import recipe_tool_fixtures
from .verdict import GateVerdict, failed_request

__all__ = ["ANSWER_ROOM_TOKENS", "DEFAULT_LONG_CONTEXT_TOKENS", "DEFAULT_MESSAGES", "long_context_gate",
           "long_context_target", "quality_checks", "quality_tools_gate",
           "reasoning_fingerprints_gate", "repeated_check_gate"]

DEFAULT_MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]
"""The conversation whose prompt length the reasoning contract measures, unless the recipe sets one."""


def reasoning_fingerprints_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Each effort's prompt-token count, from usage and /tokenize, equals its pinned fingerprint
    (``gates.reasoning.not_applicable`` declares a template without reasoning efforts: it still runs)."""
    return judged(recipe, gate, declaration(recipe, "reasoning_fingerprints"), _fingerprints(client, recipe, gate))


def _fingerprints(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    settings = recipe.gate("reasoning")
    expected: dict[str, int] = dict(settings.get("fingerprints") or {})
    efforts: list[str] = list(expected) or list(settings.get("efforts") or ["low", "high", "max"])
    messages = settings.get("messages") or DEFAULT_MESSAGES
    counts: dict[str, int] = {}
    disagreements: list[str] = []
    for effort in efforts:
        result = client.chat({"messages": messages, "reasoning_effort": effort, "max_tokens": 1,
                              "temperature": 0}, label=f"fingerprint-{effort}")
        if result.status_code != 200:
            return failed_request(result.attempt, recipe, what=f"effort {effort}: ")
        usage_count = result.prompt_tokens or 0
        tokenized = client.tokenize_chat(messages, chat_template_kwargs={"reasoning_effort": effort},
                                         label=f"tokenize-{effort}")
        if tokenized.status_code != 200:
            return failed_request(tokenized.attempt, recipe, what=f"/tokenize for {effort}: ")
        token_count = int((tokenized.body or {}).get("count", -1))
        if token_count != usage_count:
            disagreements.append(f"effort {effort}: usage.prompt_tokens {usage_count} but /tokenize {token_count}")
        counts[effort] = usage_count
    compared = bool(expected) or not recipe.discovered
    gate.measure(fingerprints=counts, fingerprints_pinned=bool(expected), efforts_compared=compared,
                 **{f"prompt_tokens_{e}": n for e, n in counts.items()})
    gate.threshold(fingerprints=expected or ("not pinned: counts must differ between efforts" if compared
                                             else "not pinned (discovered recipe): measured only"))
    gate.summary("/".join(str(counts[e]) for e in efforts) + " prompt tokens (" + "/".join(efforts) + ")")
    if not compared:
        gate.summary(f"{gate.record.summary}; nothing pinned (discovered recipe), measured only")
        problems = disagreements
    else:
        problems = disagreements + check_fingerprints(counts, expected)
    # Usage and /tokenize counting differently is the server's; the template's prompt lengths, the model's.
    kind = FailureKind.SERVER_ERROR if disagreements else FailureKind.MODEL_BEHAVIOUR
    return GateVerdict("reasoning contract: " + "; ".join(problems), kind=kind) if problems else GateVerdict()


@functools.lru_cache(maxsize=1)
def _checks_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((fixtures_dir() / "quality" / "checks.yaml").read_text())
    return data


def quality_checks(family: str) -> Any:
    """The shipped checks of one family (``fixtures/quality/checks.yaml``): a list of checks
    for ``intelligence`` and ``session_recall``, the needle and questions for ``long_context``."""
    return _checks_file()[family]


def _repeat(recipe: Recipe) -> int:
    return int(recipe.gate("quality").get("repeat", 3))


def _effort_body(recipe: Recipe) -> dict[str, Any]:
    effort = recipe.gate("quality").get("reasoning_effort")
    return {"reasoning_effort": effort} if effort else {}


def repeated_check_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, family: str,
                        check: dict[str, Any]) -> GateVerdict:
    """One known-answer check, asked ``gates.quality.repeat`` times: ``intelligence`` asks its
    prompt, ``session_recall`` replays its turns (a fact from the first turn, recalled later).

    A check with ``answer`` (a number) is judged by the answer's final number, so "3 + 4 = 7" is
    right and "not 7" or "7 or 8" is not; whether the model gave the number alone, as asked, is
    recorded beside (``number_only``). A check with ``expect`` is matched as a regular expression.
    A check the recipe declares not applicable still runs (it is cheap) and is judged against
    the declaration.
    """
    label = check["name"]
    messages = list(check["turns"]) if family == "session_recall" else [{"role": "user", "content": check["prompt"]}]
    n = _repeat(recipe)
    answers: list[str] = []
    unanswered: list[Attempt] = []
    passed = number_only = 0
    for i in range(n):
        result = client.chat({"messages": messages, "max_tokens": 32, "temperature": 0,
                              **_effort_body(recipe)}, label=f"{label}-{i + 1}")
        answer = result.content if result.status_code == 200 else _unanswered(result.attempt)
        answers.append(answer)
        if result.status_code != 200:
            unanswered.append(result.attempt)
            continue
        if "answer" in check:
            judgement = judge_final_number(answer, float(check["answer"]))
            passed += judgement.correct
            number_only += judgement.number_only
        else:
            passed += bool(re.search(check["expect"], answer, re.IGNORECASE))
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, answers_distinct=len(set(answers)))
    rule = f"final number {check['answer']}" if "answer" in check else f"/{check['expect']}/"
    if "answer" in check:
        gate.measure(number_only=number_only)
        if number_only < n:
            gate.measure(finding=f"{n - number_only}/{n} answers were not the number alone, as the prompt asks; "
                                 "judged by their final number")
    gate.threshold(required=f"{n}/{n}")
    verdict = GateVerdict(f"{label}: {passed}/{n} answers matched {rule}; answers: {quote_answers(answers)}",
                          kind=_asked_kind(unanswered)) if passed != n else GateVerdict()
    return judged(recipe, gate, quality_declaration(recipe, family), verdict)


def _unanswered(attempt: Attempt) -> str:
    """An ask the server did not answer, in the list of answers: its status code or its error kind."""
    return f"HTTP {attempt.status_code}" if attempt.status_code else str(attempt.error_kind or "no answer")


def _asked_kind(unanswered: list[Attempt]) -> FailureKind:
    """Whose failure a repeated check is: any ask the server did not answer makes it the server's
    (or the transport's), since the model was not heard on it; else the model's answers."""
    return worst_failure(a.failure_kind for a in unanswered) or FailureKind.MODEL_BEHAVIOUR


def quality_tools_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Tools, repeated: the same typed call, naming the right tool with arguments valid against its
    schema, every time, k/N; the argument values are not compared (declared not applicable under
    ``gates.quality.not_applicable.tools``, it still runs)."""
    fixtures = recipe_tool_fixtures(recipe)
    fixture = fixtures[1 % len(fixtures)]
    n = _repeat(recipe)
    passed, problems_seen = 0, []
    unanswered_kinds: list[FailureKind | None] = []
    for i in range(n):
        result = client.chat({"messages": [{"role": "user", "content": fixture.prompt}],
                              "tools": [f.openai_tool() for f in fixtures], "tool_choice": "auto",
                              "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0,
                              **_effort_body(recipe)}, label=f"quality-tool-{i + 1}")
        if result.status_code != 200:
            failed = failed_request(result.attempt, recipe, auto_tools=True)
            problems = [failed.failure or public_failure(result.attempt)]
            unanswered_kinds.append(failed.kind)
        else:
            problems = check_tool_call(result.tool_calls, fixture, value_checks=False)
        passed += not problems
        problems_seen += [p for p in problems if p not in problems_seen]
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, tool=fixture.name)
    kind = worst_failure(unanswered_kinds) or FailureKind.MODEL_BEHAVIOUR
    verdict = GateVerdict(f"tools {passed}/{n}: {'; '.join(problems_seen)}", kind=kind) if passed != n else GateVerdict()
    return judged(recipe, gate, quality_declaration(recipe, "tools"), verdict)


ANSWER_ROOM_TOKENS = 32
"""Tokens the long-context check lets the model answer in (its ``max_tokens``)."""


def long_context_target(settings: dict[str, Any], served_max_model_len: int | None) -> tuple[int | None, str]:
    """The long-context check's prompt size and how it was chosen, or None and why it cannot run.

    ``gates.quality.long_context_tokens`` when the recipe sets it and it fits; otherwise the
    served ``max_model_len`` minus room for the answer (the default 32,768 sized down to an
    8,192-token model). A size set by the recipe above what the server serves is the recipe's
    mistake, said as such.
    """
    limit = served_max_model_len
    room = (limit - ANSWER_ROOM_TOKENS) if limit is not None else None
    if "long_context_tokens" in settings:
        target = int(settings["long_context_tokens"])
        if room is not None and target > room:
            return None, (f"gates.quality.long_context_tokens {target:,} does not fit the served max_model_len "
                          f"{limit:,} with {ANSWER_ROOM_TOKENS} tokens left for the answer; lower it to at most "
                          f"{room:,}, or leave it unset to size the check to the server")
        return target, "set by the recipe"
    if room is None:
        return DEFAULT_LONG_CONTEXT_TOKENS, "the default (the served max_model_len is unknown)"
    if room < 1:
        return None, f"the served max_model_len {limit:,} leaves no room for a long prompt and its answer"
    if room >= DEFAULT_LONG_CONTEXT_TOKENS:
        return DEFAULT_LONG_CONTEXT_TOKENS, "the default"
    return room, f"sized to the served max_model_len {limit:,} minus {ANSWER_ROOM_TOKENS} tokens for the answer"


DEFAULT_LONG_CONTEXT_TOKENS = 32768
"""The long-context check's size when the recipe sets none and the server serves at least this much."""


def _long_context_question(recipe: Recipe, mode: str) -> tuple[str, str, str | None] | str:
    """(question, expected regular expression, system prompt), or why the mode cannot be judged."""
    if mode != "smoke_after_filler":
        spec = quality_checks("long_context")
        return spec["question"], spec["expect"], spec["needle"]
    # For models without a copy skill: the long prompt must not break the answer to the smoke prompt.
    smoke = recipe.gate("smoke")
    expected = smoke.get("expect_substring")
    if not expected:
        return ("smoke_after_filler compares the answer with gates.smoke.expect_substring, which the recipe "
                "does not set")
    return smoke.get("prompt", SMOKE_PROMPT), re.escape(str(expected)), None


def long_context_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, *,
                      progress: ProgressFn) -> GateVerdict:
    """Long context at an exact prompt length, k/N (N is ``long_context_repeat``, else ``repeat``): in
    "needle" mode a fact at the start is recalled at the end; in "smoke_after_filler" mode the smoke
    prompt is answered after filler (no recall). Without ``long_context_tokens`` the prompt is sized
    to what the server serves; a size that cannot be built is a failure that says why, not an error."""
    return gate.ended(_long_context(client, recipe, gate, progress=progress))


def _long_context(client: QualClient, recipe: Recipe, gate: GateRecorder, *, progress: ProgressFn) -> GateVerdict:
    reason = quality_declaration(recipe, "long_context")
    if reason is not None:
        return not_run(recipe, gate, reason, "each long prompt costs a full prefill")
    settings = recipe.gate("quality")
    mode = settings.get("long_context_check", "needle")
    question = _long_context_question(recipe, mode)
    if isinstance(question, str):
        return GateVerdict(f"long context ({mode}): {question}", kind=FailureKind.CONFIG)
    text, expect, system = question
    shape = ChatShape(question=text, system_prompt=system, reasoning_effort=settings.get("reasoning_effort"))
    counter = ServerTokenCounter(client.http, client.model)
    builder = ExactPromptBuilder(counter)
    n = int(settings.get("long_context_repeat", _repeat(recipe)))
    try:
        counter.count_chat(shape.messages(text), shape)  # learns the served max_model_len
        target, sized = long_context_target(settings, counter.max_model_len)
        if target is None:
            return GateVerdict(f"long context ({mode}) cannot run: {sized}", kind=FailureKind.CONFIG)
        # Built before the first request: calibration between requests would wait out the server's
        # post-step busy-poll (docs/PERFORMANCE.md).
        prompts = [builder.build(target, shape, nonce=new_nonce(f"long-{i}")) for i in range(n)]
    except CalibrationError as exc:
        return GateVerdict(f"long context ({mode}): no prompt of the asked size could be built: {exc}",
                           kind=FailureKind.SERVER_ERROR)
    gate.measure(target_tokens=target, sized=sized)
    passed, answers, sizes, unanswered = 0, [], [], []
    for i, prompt in enumerate(prompts):
        progress(f"long-context check {i + 1}/{n}: {prompt.measured_tokens:,} prompt tokens")
        result = client.chat({**prompt.request_fields(), "max_tokens": ANSWER_ROOM_TOKENS, "temperature": 0},
                             label=f"long-context-{i + 1}")
        sizes.append(result.prompt_tokens)
        answer = result.content if result.status_code == 200 else _unanswered(result.attempt)
        answers.append(answer)
        unanswered += [] if result.status_code == 200 else [result.attempt]
        passed += result.status_code == 200 and bool(re.search(expect, answer, re.IGNORECASE))
    gate.summary(f"{passed}/{n} at {target:,} tokens ({mode.replace('_', ' ')})")
    gate.measure(passed=passed, repeat=n, prompt_tokens=sizes, check=mode)
    if passed != n:
        return GateVerdict(f"long context ({mode}) {passed}/{n} at {target:,} tokens matched /{expect}/; "
                           f"answers: {quote_answers(answers)}", kind=_asked_kind(unanswered))
    return GateVerdict()
