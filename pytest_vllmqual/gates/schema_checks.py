"""JSON-Schema checks of a model's output: its JSON content, and a value's violations as a path and
a kind of value (never the model's text); and the warm-up that pays jsonschema's one-time costs
while the server boots."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.privacy.public_text import ANSWER_QUOTE_CHARS, quote_answer
from pytest_vllmqual.schema_errors import SchemaProblem, worded
from pytest_vllmqual.schema_errors import schema_problems as all_problems

__all__ = ["ArgumentViolation", "check_json_content", "schema_problems", "schema_violations", "warm_up_validation"]


def warm_up_validation() -> None:
    """Pay jsonschema's one-time costs (lazy imports, first validator build) up front: the
    plugin calls this while the server boots, not right after a request, where the server's
    post-step busy-poll makes CPU scarce on small machines (docs/PERFORMANCE.md)."""
    schema_problems({"a": "b"}, {"type": "object", "properties": {"a": {"type": "string"}}}, "warm-up")


def _bounded(value: Any) -> str:
    """A value of the model's answer as a message shows it: in full when short, else cut."""
    return repr(value) if len(repr(value)) <= ANSWER_QUOTE_CHARS else quote_answer(value)


def schema_problems(instance: Any, schema: dict[str, Any], what: str) -> list[str]:
    """Every JSON-Schema violation of ``instance`` (``schema_errors``' wording; a long value cut)."""
    return [worded(problem, f"{what} violates the schema") for problem in all_problems(instance, schema, value=_bounded)]


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
    """What is wrong there, e.g. ``missing``, ``must be of type integer, got a string``."""
    problem: SchemaProblem | None = field(default=None, compare=False, repr=False)
    """The whole problem, for the message (``schema_errors.worded``)."""

    def worded(self, where: str) -> str:
        """The violation as every schema message of the package says it, after ``where``."""
        return worded(self.problem or SchemaProblem(self.path, self.kind, f"key {self.path!r} {self.kind}", ""), where)


def schema_violations(instance: Any, schema: dict[str, Any]) -> list[ArgumentViolation]:
    """Every JSON-Schema violation of ``instance`` as a path and what is wrong there, in path order;
    the value itself is not shown (``schema_errors``' wording, values hidden)."""
    found = {(p.key, p.said): ArgumentViolation(p.key, p.said, p) for p in all_problems(instance, schema, value=None)}
    return sorted(found.values(), key=lambda v: (v.path, v.kind))
