"""The gates that judge the model's answers, one function per gate: the reasoning prompt
contract (per-effort prompt-token fingerprints) and the repeated quality checks reported as
k/N (known-answer questions, session recall, a repeated tool call, long context).

A quality check the recipe declares not applicable (``gates.quality.not_applicable``) ends
as skipped with the recipe's reason, never as passed. Each function writes its gate's
measurements and summary and returns a ``GateVerdict``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from pytest_vllmqual.client.prompts import ChatShape, ExactPromptBuilder, new_nonce
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.token_counters import ServerTokenCounter
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.layout import fixtures_dir
from pytest_vllmqual.privacy.public_text import public_failure, quote_answers
from pytest_vllmqual.recipe.loader import Recipe

from .checks import GateVerdict, check_fingerprints, check_tool_call, recipe_tool_fixtures
from .recorder import GateRecorder

__all__ = ["DEFAULT_MESSAGES", "long_context_gate", "quality_checks", "quality_tools_gate",
           "reasoning_fingerprints_gate", "repeated_check_gate"]

DEFAULT_MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]
"""The conversation whose prompt length the reasoning contract measures, unless the recipe sets one."""


def reasoning_fingerprints_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Each effort's prompt-token count, from usage and /tokenize, equals its pinned fingerprint."""
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
            return GateVerdict(f"effort {effort}: {public_failure(result.attempt)}")
        usage_count = result.prompt_tokens or 0
        tokenized = client.tokenize_chat(messages, chat_template_kwargs={"reasoning_effort": effort},
                                         label=f"tokenize-{effort}")
        if tokenized.status_code != 200:
            return GateVerdict(f"/tokenize for {effort}: HTTP {tokenized.status_code}")
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
    return GateVerdict("reasoning contract: " + "; ".join(problems)) if problems else GateVerdict()


@functools.lru_cache(maxsize=1)
def _checks_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((fixtures_dir() / "quality" / "checks.yaml").read_text())
    return data


def quality_checks(family: str) -> Any:
    """The shipped checks of one family (``fixtures/quality/checks.yaml``): a list of checks
    for ``intelligence`` and ``session_recall``, the needle and questions for ``long_context``."""
    return _checks_file()[family]


def _not_applicable(recipe: Recipe, gate: GateRecorder, check: str) -> GateVerdict | None:
    reasons: dict[str, str] = recipe.gate("quality").get("not_applicable") or {}
    reason = reasons.get(check) or reasons.get(check.split("[")[0].split(".")[0])
    if not reason:
        return None
    gate.summary("not applicable")
    return GateVerdict(skip_reason=f"not applicable to recipe {recipe.name}: {reason}")


def _repeat(recipe: Recipe) -> int:
    return int(recipe.gate("quality").get("repeat", 3))


def _effort_body(recipe: Recipe) -> dict[str, Any]:
    effort = recipe.gate("quality").get("reasoning_effort")
    return {"reasoning_effort": effort} if effort else {}


def repeated_check_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, family: str,
                        check: dict[str, Any]) -> GateVerdict:
    """One known-answer check, asked ``gates.quality.repeat`` times: ``intelligence`` asks its
    prompt, ``session_recall`` replays its turns (a fact from the first turn, recalled later)."""
    skipped = _not_applicable(recipe, gate, family)
    if skipped is not None:
        return skipped
    label, expect = check["name"], check["expect"]
    messages = list(check["turns"]) if family == "session_recall" else [{"role": "user", "content": check["prompt"]}]
    n = _repeat(recipe)
    answers: list[str] = []
    passed = 0
    for i in range(n):
        result = client.chat({"messages": messages, "max_tokens": 32, "temperature": 0,
                              **_effort_body(recipe)}, label=f"{label}-{i + 1}")
        answer = result.content if result.status_code == 200 else f"HTTP {result.status_code}"
        answers.append(answer)
        if result.status_code == 200 and re.search(expect, answer, re.IGNORECASE):
            passed += 1
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, answers_distinct=len(set(answers)))
    gate.threshold(required=f"{n}/{n}")
    if passed != n:
        return GateVerdict(f"{label}: {passed}/{n} answers matched /{expect}/; answers: {quote_answers(answers)}")
    return GateVerdict()


def quality_tools_gate(client: QualClient, recipe: Recipe, gate: GateRecorder) -> GateVerdict:
    """Tools, repeated: the same typed call is made correctly every time, k/N."""
    skipped = _not_applicable(recipe, gate, "tools")
    if skipped is not None:
        return skipped
    fixtures = recipe_tool_fixtures(recipe)
    fixture = fixtures[1 % len(fixtures)]
    n = _repeat(recipe)
    passed, problems_seen = 0, []
    for i in range(n):
        result = client.chat({"messages": [{"role": "user", "content": fixture.prompt}],
                              "tools": [f.openai_tool() for f in fixtures], "tool_choice": "auto",
                              "max_tokens": recipe.gate("tools").get("max_tokens", 256), "temperature": 0,
                              **_effort_body(recipe)}, label=f"quality-tool-{i + 1}")
        problems = (check_tool_call(result.tool_calls, fixture, value_checks=False)
                    if result.status_code == 200 else [f"HTTP {result.status_code}"])
        passed += not problems
        problems_seen += problems
    gate.summary(f"{passed}/{n}")
    gate.measure(passed=passed, repeat=n, tool=fixture.name)
    if passed != n:
        return GateVerdict(f"tools {passed}/{n}: {'; '.join(problems_seen)}")
    return GateVerdict()


def long_context_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, *,
                      progress: ProgressFn) -> GateVerdict:
    """Long context at an exact prompt length, k/N (N is ``long_context_repeat``, else ``repeat``): in
    "needle" mode a fact at the start is recalled at the end; in "smoke_after_filler" mode the smoke
    prompt is answered after filler (no recall)."""
    skipped = _not_applicable(recipe, gate, "long_context")
    if skipped is not None:
        return skipped
    spec = quality_checks("long_context")
    settings = recipe.gate("quality")
    target = int(settings.get("long_context_tokens", 32768))
    mode = settings.get("long_context_check", "needle")
    if mode == "smoke_after_filler":
        # For models without a copy skill: the long prompt must not break the answer to the smoke prompt.
        question, expect, system = recipe.gate("smoke").get("prompt", "Say cloud."), spec["smoke_expect"], None
    else:
        question, expect, system = spec["question"], spec["expect"], spec["needle"]
    shape = ChatShape(question=question, system_prompt=system, reasoning_effort=settings.get("reasoning_effort"))
    builder = ExactPromptBuilder(ServerTokenCounter(client.http, client.model))
    n = int(settings.get("long_context_repeat", _repeat(recipe)))
    passed, answers, sizes = 0, [], []
    # Built before the first request: calibration between requests would wait out the server's
    # post-step busy-poll (docs/PERFORMANCE.md).
    prompts = [builder.build(target, shape, nonce=new_nonce(f"long-{i}")) for i in range(n)]
    for i, prompt in enumerate(prompts):
        progress(f"long-context check {i + 1}/{n}: {prompt.measured_tokens:,} prompt tokens")
        result = client.chat({**prompt.request_fields(), "max_tokens": 32, "temperature": 0},
                             label=f"long-context-{i + 1}")
        sizes.append(result.prompt_tokens)
        answer = result.content if result.status_code == 200 else f"HTTP {result.status_code}"
        answers.append(answer)
        passed += result.status_code == 200 and bool(re.search(expect, answer, re.IGNORECASE))
    gate.summary(f"{passed}/{n} at {target:,} tokens ({mode.replace('_', ' ')})")
    gate.measure(passed=passed, repeat=n, target_tokens=target, prompt_tokens=sizes, check=mode)
    if passed != n:
        return GateVerdict(f"long context ({mode}) {passed}/{n} at {target:,} tokens matched /{expect}/; "
                           f"answers: {quote_answers(answers)}")
    return GateVerdict()
