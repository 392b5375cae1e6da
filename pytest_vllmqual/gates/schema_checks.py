"""JSON-Schema checks of a model's output: its JSON content, and a value's violations as a path and
a kind of value (never the model's text); and the warm-up that pays jsonschema's one-time costs
while the server boots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from pytest_vllmqual.client.sdk_findings import json_kind
from pytest_vllmqual.layout import key_path
from pytest_vllmqual.privacy.public_text import ANSWER_QUOTE_CHARS, quote_answer

__all__ = ["ArgumentViolation", "check_json_content", "schema_problems", "schema_violations", "warm_up_validation"]


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
