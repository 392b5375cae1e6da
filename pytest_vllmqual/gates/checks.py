"""Gate checks as plain functions: each returns the list of rules a response broke.

Gates in ``suites/`` call these and assert the list is empty, so the failure message says
exactly what broke ("tool call 0 names get_time, expected get_weather"), and unit tests can
show each gate turning red on a broken response without a server. The smoke request lives
here once (``run_smoke``): the smoke gate and the ladder's post-probe smoke both send it.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import ChatResult, StreamResult
from pytest_vllmqual.client.sdk_findings import json_kind
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.launch.registry import launcher_class
from pytest_vllmqual.layout import key_path
from pytest_vllmqual.privacy.public_text import ANSWER_QUOTE_CHARS, quote_answer
from pytest_vllmqual.recipe.gate_settings import SMOKE_PROMPT
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import Attempt, FailureKind
from pytest_vllmqual.vllm.server_messages import public_failure

__all__ = ["SMOKE_PROMPT", "ArgumentViolation", "GateVerdict", "NumberAnswer", "SmokeResult", "SmokeRule", "ToolCase", "ToolProblem",
           "auto_tool_choice", "check_fingerprints", "check_json_content", "check_stream_tool",
           "check_tool_call", "failed_request", "load_tool_fixtures", "missing_tool_flags", "recipe_tool_fixtures",
           "recipe_tool_fixtures_path", "run_smoke", "schema_problems", "schema_violations", "shipped_tool_fixtures",
           "tool_call_problems", "tool_flags_problem", "warm_up_validation"]


@dataclass(frozen=True, repr=False)
class GateVerdict:
    """How a shipped gate ended: passed, failed with the first rule it broke (the message the
    test fails with), or skipped with the reason. The gate function has already written its
    measurements, thresholds and summary into the recorder; the test asserts on this.

    ``kind`` says whose failure it is (:class:`FailureKind`); a failure without one is never
    excused by a declaration."""

    failure: str | None = None
    skip_reason: str | None = None
    kind: FailureKind | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and self.skip_reason is None

    def __repr__(self) -> str:  # short: pytest prints it under a failed assertion
        return f"GateVerdict({'passed' if self.passed else 'failed' if self.failure else 'skipped'})"


@dataclass(frozen=True)
class ToolCase:
    """One case of the tool gates: a typed tool, the prompt that should make a model call it,
    and the arguments expected (one entry of the typed-tool fixtures file)."""

    name: str
    description: str
    parameters: dict[str, Any]
    prompt: str
    expected: dict[str, Any]

    def openai_tool(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def responses_tool(self) -> dict[str, Any]:
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters}


def recipe_tool_fixtures_path(setting: str | None, project_root: Path) -> Path:
    """The typed-tool fixtures of a recipe: its ``gates.tools.fixtures`` (relative to its project),
    else the shipped ``fixtures/tools/typed_tools.yaml`` (checkout or installed package)."""
    if setting:
        path = Path(setting)
        return path if path.is_absolute() else project_root / path
    from pytest_vllmqual.layout import fixtures_dir

    return fixtures_dir() / "tools" / "typed_tools.yaml"


def recipe_tool_fixtures(recipe: Recipe) -> list[ToolCase]:
    """The typed tools a recipe's gates call (``gates.tools.fixtures``, else the shipped file)."""
    return load_tool_fixtures(recipe_tool_fixtures_path(recipe.gate("tools").get("fixtures"), recipe.project_root))


def shipped_tool_fixtures() -> list[ToolCase]:
    """The shipped typed tools, read once for the session (none when the file is absent).

    Read while no request is in flight: right after one, the server's post-step busy-poll makes
    the CPU scarce on small machines and parsing the file waits for it (docs/PERFORMANCE.md).
    Later reads of the same file are served from ``load_tool_fixtures``'s cache.
    """
    from pytest_vllmqual.layout import fixtures_dir

    path = fixtures_dir() / "tools" / "typed_tools.yaml"
    return load_tool_fixtures(path) if path.is_file() else []


def load_tool_fixtures(path: Path) -> list[ToolCase]:
    """The typed tool fixtures (``fixtures/tools/typed_tools.yaml``), read once per file version.

    Four gates use them, each right after a request, when the server's post-step busy-poll
    makes the CPU scarce on small machines, so parsing the YAML again would stall each of them
    (docs/PERFORMANCE.md).
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise RecipeError(f"tool fixtures {path} cannot be read: {exc}. Fix: restore the file.",
                          path=str(path)) from None
    return list(_load_tool_fixtures(str(path.resolve()), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=8)
def _load_tool_fixtures(path: str, _mtime_ns: int, _size: int) -> tuple[ToolCase, ...]:
    try:
        data = yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise RecipeError(f"tool fixtures {path} cannot be read: {exc}. Fix: restore the file.",
                          path=path) from None
    return tuple(ToolCase(name=t["name"], description=t.get("description", ""), parameters=t["parameters"],
                             prompt=t["prompt"], expected=t.get("expected", {})) for t in data["tools"])


def warm_up_validation() -> None:
    """Pay jsonschema's one-time costs (lazy imports, first validator build) up front: the
    plugin calls this while the server boots, not right after a request, where the server's
    post-step busy-poll makes CPU scarce on small machines (docs/PERFORMANCE.md)."""
    schema_problems({"a": "b"}, {"type": "object", "properties": {"a": {"type": "string"}}}, "warm-up")


def schema_problems(instance: Any, schema: dict[str, Any], what: str) -> list[str]:
    """Every JSON-Schema violation of ``instance``, phrased with its path."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        where = key_path(error.absolute_path)
        # The message quotes the value; one longer than an answer quote is quoted bounded instead.
        said = (error.message if len(repr(error.instance)) <= ANSWER_QUOTE_CHARS
                else f"{quote_answer(error.instance)} fails its {error.validator!r} rule")
        problems.append(f"{what} violates the schema at {where}: {said}")
    return problems


def check_json_content(content: str, schema: dict[str, Any], finish_reason: str | None) -> list[str]:
    """JSON gate: content parses, validates, and the model stopped by itself."""
    problems: list[str] = []
    if finish_reason != "stop":
        problems.append(f"finish_reason is {finish_reason!r}, expected 'stop'")
    try:
        value = json.loads(content)
    except json.JSONDecodeError as exc:
        return [*problems, f"content is not JSON ({exc.msg} at char {exc.pos}): {quote_answer(content)}"]
    return problems + schema_problems(value, schema, "content")


@dataclass(frozen=True)
class ArgumentViolation:
    """One place where a value breaks its JSON Schema: the path and the kind of value, never the
    value itself (it is the model's output)."""

    path: str
    """The path in the value, e.g. ``start.time`` (``layout.key_path``'s spelling)."""
    kind: str
    """What is wrong there, e.g. ``missing``, ``a string where the schema needs integer``."""


def _violation_kinds(error: Any) -> list[tuple[list[Any], str]]:
    """(path, kind) pairs of one jsonschema error; ``required`` and ``additionalProperties``
    name the property itself, so the path says which one."""
    path, kind, rule = list(error.absolute_path), json_kind(error.instance), error.validator
    if rule == "required" and isinstance(error.instance, dict):
        return [([*path, name], "missing") for name in error.validator_value if name not in error.instance]
    if rule == "additionalProperties" and isinstance(error.instance, dict):
        known = set((error.schema or {}).get("properties") or {})
        return [([*path, name], "not in the schema (additionalProperties is false)")
                for name in error.instance if name not in known]
    article = "an" if kind[:1] in "aeiou" else "a"
    if rule == "type":
        return [(path, f"{article} {kind} where the schema needs {error.validator_value}")]
    if rule == "enum":
        return [(path, f"{article} {kind} outside the enum ({', '.join(map(str, error.validator_value))})")]
    return [(path, f"{article} {kind} that breaks {rule} {error.validator_value}")]


def schema_violations(instance: Any, schema: dict[str, Any]) -> list[ArgumentViolation]:
    """Every JSON-Schema violation of ``instance`` as a path and a kind of value, in path order."""
    validator = jsonschema.Draft202012Validator(schema)
    found: dict[tuple[str, str], ArgumentViolation] = {}
    for error in validator.iter_errors(instance):
        for path, kind in _violation_kinds(error):
            violation = ArgumentViolation(key_path(path), kind)
            found.setdefault((violation.path, violation.kind), violation)
    return sorted(found.values(), key=lambda v: (v.path, v.kind))


@dataclass(frozen=True)
class ToolProblem:
    """One rule a tool call broke: the sentence a gate fails with, and its path and kind."""

    text: str
    kind: str
    path: str | None = None


def tool_call_problems(calls: list[dict[str, Any]], fixture: ToolCase, *, value_checks: bool) -> list[ToolProblem]:
    """Typed-tool gate: exactly one call, the right name, arguments valid (and equal if asked).

    ``calls`` are OpenAI tool_calls entries ({"function": {"name", "arguments"}}) or
    reassembled ``{"name", "arguments"}`` dicts. A schema violation says the path in the
    arguments and the kind of value (``start.time``: missing), not the model's text.
    """
    if not calls:
        return [ToolProblem(f"no tool call; expected a call to {fixture.name}", "no tool call")]
    problems: list[ToolProblem] = []
    if len(calls) > 1:
        problems.append(ToolProblem(f"{len(calls)} tool calls; expected exactly one", "several tool calls"))
    call = calls[0]
    function = call.get("function", call)
    name = function.get("name")
    if name != fixture.name:
        problems.append(ToolProblem(f"tool call names {name!r}, expected {fixture.name!r}", "another tool", "name"))
        return problems
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return [*problems, ToolProblem(f"arguments of {fixture.name} are not JSON ({exc.msg}): {quote_answer(str(raw))}",
                                       "not JSON", "arguments")]
    violations = schema_violations(arguments, fixture.parameters)
    problems += [ToolProblem(f"arguments of {fixture.name} violate the schema at {v.path}: {v.kind}", v.kind, v.path)
                 for v in violations]
    if value_checks and not problems and arguments != fixture.expected:
        problems.append(ToolProblem(f"arguments of {fixture.name} are {quote_answer(arguments)}, expected "
                                    f"{fixture.expected}",
                                    "other values than expected", "arguments"))
    return problems


def check_tool_call(
    calls: list[dict[str, Any]], fixture: ToolCase, *, value_checks: bool
) -> list[str]:
    """Typed-tool gate's rules as sentences (see :func:`tool_call_problems`)."""
    return [p.text for p in tool_call_problems(calls, fixture, value_checks=value_checks)]


def check_stream_tool(result: StreamResult, fixture: ToolCase, *, value_checks: bool) -> list[str]:
    """Streaming-tool gate: the SSE contract, then the reassembled call. A request the server did
    not answer is said as every gate says it (:func:`public_failure`): never the server's own text."""
    problems = list(result.violations)
    if result.status_code != 200:
        return [public_failure(result.attempt), *problems]
    calls = [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls]
    problems += check_tool_call(calls, fixture, value_checks=value_checks)
    if result.tool_calls and result.finish_reason != "tool_calls":
        problems.append(f"finish_reason is {result.finish_reason!r}, expected 'tool_calls'")
    return problems


def auto_tool_choice(tool_choice: Any) -> bool:
    """A request with tools and this ``tool_choice`` needs vLLM's tool parser (``auto``, or none given)."""
    return tool_choice is None or tool_choice == "auto"


_TOOL_FLAGS = (("--enable-auto-tool-choice", "serve.enable_auto_tool_choice: true"),
               ("--tool-call-parser", "serve.tool_call_parser: NAME"))


def missing_tool_flags(recipe: Recipe) -> list[tuple[str, str]]:
    """The serve flags ``tool_choice: auto`` needs that the server this recipe starts lacks, each
    with the recipe key that sets it; none for an endpoint the run does not start (its flags are
    not the recipe's)."""
    if not launcher_class(recipe.launcher.kind).starts_server:
        return []
    argv = [*recipe.launcher.command, *recipe.serve.extra_args]
    given = {"--enable-auto-tool-choice": recipe.serve.enable_auto_tool_choice,
             "--tool-call-parser": bool(recipe.serve.tool_call_parser)}
    return [(flag, key) for flag, key in _TOOL_FLAGS
            if not given[flag] and not any(a == flag or a.startswith(f"{flag}=") for a in argv)]


def tool_flags_problem(recipe: Recipe, status_code: int | None, *, auto_tools: bool) -> str | None:
    """Why an HTTP 400 to a request with tools for vLLM's tool parser (``auto_tools``) is the
    recipe's own doing: the server it starts lacks the flags that parser needs (named, with the
    recipe keys that set them); None when it is not."""
    missing = missing_tool_flags(recipe) if auto_tools and status_code == 400 else []
    if not missing:
        return None
    return (f"the recipe starts the server without {' and '.join(f for f, _ in missing)}, which tool_choice auto "
            f"needs. Fix: set {' and '.join(k for _, k in missing)} in the recipe")


def failed_request(attempt: Attempt, recipe: Recipe, *, auto_tools: bool = False, what: str = "") -> GateVerdict:
    """A gate's failure for a request the server did not answer as asked: said without the server's
    own text (:func:`public_failure`), with its kind; ``config`` where the recipe's missing tool
    flags caused it (:func:`tool_flags_problem`)."""
    said = public_failure(attempt)
    flags = tool_flags_problem(recipe, attempt.status_code, auto_tools=auto_tools)
    if flags:
        return GateVerdict(f"{what}{said}; {flags}", kind=FailureKind.CONFIG)
    return GateVerdict(f"{what}{said}", kind=attempt.failure_kind)


@dataclass(frozen=True)
class SmokeRule:
    """What a smoke answer must be, from the recipe's ``gates.smoke``: how it may finish
    (``finish_reasons``, default ``[stop]``) and the text it must hold (``expect_substring``)."""

    prompt: str = SMOKE_PROMPT
    max_tokens: int = 32
    finish_reasons: tuple[str, ...] = ("stop",)
    expect: str | None = None

    @classmethod
    def of(cls, recipe: Recipe) -> SmokeRule:
        settings = recipe.gate("smoke")
        return cls(prompt=settings.get("prompt", SMOKE_PROMPT), max_tokens=int(settings.get("max_tokens", 32)),
                   finish_reasons=tuple(settings.get("finish_reasons") or ("stop",)),
                   expect=settings.get("expect_substring") or None)

    def finish_problem(self, finish_reason: str | None) -> str | None:
        """Why the answer's finish reason breaks the rule, or None."""
        if finish_reason in self.finish_reasons:
            return None
        allowed = " or ".join(repr(r) for r in self.finish_reasons)
        why = (f": the model did not end its answer within {self.max_tokens} tokens"
               if finish_reason == "length" else "")
        return f"finished with {finish_reason!r}, not {allowed}{why}"

    def text_problem(self, content: str) -> str | None:
        """Why the answer's text breaks the rule (empty, or without the expected text), or None."""
        if not content.strip():
            return "returned empty content"
        if self.expect and self.expect.lower() not in content.lower():
            return f"answer {quote_answer(content)} lacks {self.expect!r}"
        return None


@dataclass(frozen=True)
class SmokeResult:
    """The recipe's smoke request and its answer, judged by the recipe's smoke rule."""

    chat: ChatResult
    max_tokens: int
    rule: SmokeRule = SmokeRule()

    @property
    def outcome(self) -> str:
        """'passed' (HTTP 200, an allowed finish reason, the expected text) or what went wrong, as a
        rung records it."""
        chat = self.chat
        if chat.status_code != 200:
            return f"failed: HTTP {chat.status_code}"
        if self.rule.finish_problem(chat.finish_reason) or not chat.content.strip():
            return f"failed: finish_reason {chat.finish_reason!r}, content {quote_answer(chat.content)}"
        lacking = self.rule.text_problem(chat.content)
        return f"failed: {lacking}" if lacking else "passed"


def run_smoke(client: QualClient, recipe: Recipe, *, label: str) -> SmokeResult:
    """Send the recipe's smoke prompt (``gates.smoke``: prompt, max_tokens) at temperature 0."""
    rule = SmokeRule.of(recipe)
    chat = client.chat({"messages": [{"role": "user", "content": rule.prompt}],
                        "max_tokens": rule.max_tokens, "temperature": 0}, label=label)
    return SmokeResult(chat, rule.max_tokens, rule)


def check_fingerprints(counts: dict[str, int], expected: dict[str, int]) -> list[str]:
    """Reasoning contract: counts match the pinned fingerprints and differ between efforts."""
    problems: list[str] = []
    if len(counts) > 1 and len(set(counts.values())) == 1:
        problems.append(
            f"the prompt has {next(iter(counts.values()))} tokens at every effort "
            f"({', '.join(counts)}): the chat template ignores reasoning_effort")
    elif len(set(counts.values())) < len(counts):
        problems.append(f"some efforts give the same prompt length: {counts}")
    for effort, want in expected.items():
        got = counts.get(effort)
        if got != want:
            problems.append(f"effort {effort}: {got} prompt tokens, expected fingerprint {want}")
    return problems


_NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d+(?:[.,]\d+)?(?![\w.]\d)")
_NEGATED = re.compile(r"(?:\bnot|\bnever|\bno|n't|\bisn't|\bwouldn't)\W*(?:\w+\W+)?$", re.IGNORECASE)
_ALTERNATIVE = re.compile(r"^\W*(?:or|and/or)\W*$", re.IGNORECASE)


@dataclass(frozen=True)
class NumberAnswer:
    """An answer to a known-answer arithmetic question, judged by its final number."""

    correct: bool
    """The last number the answer affirms is the expected one, and no alternative is offered."""
    number_only: bool
    """The answer is the number alone (the prompt asks for it; a finding, not a pass rule)."""
    why: str
    """What decided it, in the harness's words (no model text)."""


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace("\u2212", "-").replace(",", "."))
    except ValueError:
        return None


def judge_final_number(answer: str, expected: float) -> NumberAnswer:
    """Judge an arithmetic answer by its final number: "3 + 4 = 7" and "7." are correct; "not 7"
    (negated) and "7 or 8" / "8 or 7" (an alternative offered) are not. Whether the model
    followed "number only" is reported beside, never part of the judgement."""
    stripped = answer.strip().rstrip(".!").strip()
    found = list(_NUMBER.finditer(answer))
    only = len(found) == 1 and _NUMBER.fullmatch(stripped) is not None
    if not found:
        return NumberAnswer(False, False, "no number in the answer")
    for left, right in itertools.pairwise(found):
        if _ALTERNATIVE.match(answer[left.end():right.start()]):
            return NumberAnswer(False, only, "the answer offers alternatives")
    affirmed = [m for m in found if not _NEGATED.search(answer[:m.start()][-24:])]
    if not affirmed:
        return NumberAnswer(False, only, "the answer negates its only number")
    value = _as_number(affirmed[-1].group())
    if value is None or abs(value - float(expected)) > 1e-9:
        return NumberAnswer(False, only, "the final number is not the expected one")
    return NumberAnswer(True, only, "the final number is the expected one")
