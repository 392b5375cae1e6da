"""Every JSON-Schema violation the package reports, worded one way for every reader.

A recipe, a fleet or campaign file, a report, a comparison, a fleet record, a model's JSON answer
and a tool call's arguments are all checked against a JSON Schema; whichever it is, a violation
is read the same way: the key path (``layout.key_path``: ``jobs.0.name``, ``(top level)``), what
is wrong there, and for a file a person wrote, how to fix it. What differs by reader is a
parameter, never a second wording: the words naming what was checked (``where``), whether the
fix is said, and how a value is shown (in full, bounded for a model's answer, or only its kind
where the value must not be repeated).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from pytest_vllmqual.errors import VllmQualError
from pytest_vllmqual.layout import TOP_LEVEL, key_path, load_schema

__all__ = ["SchemaProblem", "ValueShown", "error_key", "errors_against", "first_message", "json_kind", "problems_of",
           "raise_if_invalid", "schema_problems", "violations", "worded"]

ValueShown = Callable[[Any], str] | None
"""How a message shows the offending value: ``repr`` (in full), a bounding function (a model's
answer), or None (only the kind of value, ``a string``: the value itself is not repeated)."""


@dataclass(frozen=True)
class SchemaProblem:
    """One violation: where it is, what is wrong there (with and without the key) and the fix."""

    key: str
    """The key path, ``layout.key_path``'s spelling; for a missing or unknown key, that key."""
    said: str
    """What is wrong at ``key``, without it: ``missing``, ``unknown key``, ``must be of type integer, got a string``."""
    text: str
    """The sentence with the key: ``key 'size' must be of type integer, got str 'two'``."""
    fix: str
    """What a person editing the file does about it: ``rename it to 'size'``."""


def violations(instance: Any, schema: dict[str, Any]) -> list[jsonschema.ValidationError]:
    """Every violation of ``schema`` by ``instance``, shallowest first (then by jsonschema's message)."""
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(validator.iter_errors(instance), key=lambda e: (len(list(e.absolute_path)), e.message))


def json_kind(value: Any) -> str:
    """The JSON kind of a value (``null``, ``boolean``, ``integer``, ``number``, ``string``,
    ``array``, ``object``): what a finding says was sent, never the value itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _kind(value: Any) -> str:
    """The JSON kind of a value with its article (``a string``, ``an integer``), never the value."""
    kind = json_kind(value)
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _below(key: str, name: str) -> str:
    return name if key == TOP_LEVEL else f"{key}.{name}"


def _described(schema: Any) -> str:
    return f" ({schema['description']})" if isinstance(schema, dict) and schema.get("description") else ""


def _named(error: jsonschema.ValidationError, key: str) -> list[SchemaProblem]:
    """A missing or unknown key: one problem per key, each named by its own path."""
    properties = error.schema.get("properties") or {} if isinstance(error.schema, dict) else {}
    if error.validator == "required":
        names = [n for n in error.validator_value if n not in error.instance] or re.findall(r"'([^']+)'", error.message)
        return [SchemaProblem(_below(key, name), "missing", f"missing required key {_below(key, name)!r}"
                              f"{_described(properties.get(name))}", "add it") for name in names]
    allowed = sorted(properties)
    found = []
    for name in [n for n in error.instance if n not in allowed]:
        close = difflib.get_close_matches(name, allowed, n=1)
        fix = f"rename it to {close[0]!r}" if close else f"remove it; allowed keys here: {', '.join(allowed)}"
        found.append(SchemaProblem(_below(key, name), "unknown key", f"unknown key {_below(key, name)!r}", fix))
    return found


def error_key(error: jsonschema.ValidationError) -> str:
    """The key path of a violation (``jobs.0.placement``), or ``(top level)``: ``layout.key_path``'s spelling."""
    return key_path(error.absolute_path)


def problems_of(error: jsonschema.ValidationError, *, value: ValueShown = repr) -> list[SchemaProblem]:
    """One jsonschema error as the problems a reader is told (a missing or unknown key each its own)."""
    key, instance, rule = error_key(error), error.instance, error.validator
    if rule in ("required", "additionalProperties") and isinstance(instance, dict):
        return _named(error, key)
    shown = value(instance) if value is not None else _kind(instance)
    if rule == "type":
        expected = error.validator_value
        text = " or ".join(expected) if isinstance(expected, list) else str(expected)
        got = f"{type(instance).__name__} {shown}" if value is not None else shown
        said, fix = f"must be of type {text}, got {got}", f"write {'an' if text[:1] in 'aeiou' else 'a'} {text} value for {key!r}"
    elif rule == "enum":
        said = f"is {shown}, which is not one of {', '.join(map(str, error.validator_value))}"
        fix = "use one of those values"
    elif rule == "pattern":
        said = f"is {shown}, which does not have the form {error.validator_value!r}"
        fix = f"write it in that form{_described(error.schema)}"
    elif value is not None and shown == repr(instance):  # jsonschema's own sentence quotes the value in full
        return [SchemaProblem(key, error.message, f"key {key!r}: {error.message}", f"correct the value of {key!r}")]
    else:
        said, fix = f"is {shown}, which breaks its {rule} rule {error.validator_value!r}", f"correct the value of {key!r}"
    return [SchemaProblem(key, said, f"key {key!r} {said}", fix)]


def schema_problems(instance: Any, schema: dict[str, Any], *, value: ValueShown = repr) -> list[SchemaProblem]:
    """Every problem of ``instance`` against ``schema``, shallowest first; empty when valid."""
    return [problem for error in violations(instance, schema) for problem in problems_of(error, value=value)]


def worded(problem: SchemaProblem, where: str, *, fix: bool = False, more: int = 0) -> str:
    """The message a reader sees: ``where`` (what was checked), the problem, the fix where a person
    wrote the thing checked, and how many more problems follow."""
    text = f"{where}: {problem.text}"
    if fix:
        text += f". Fix: {problem.fix}."
    if more:
        text += f" ({more} more problem(s) after this one is fixed.)"
    return text


def first_message(instance: Any, schema: dict[str, Any], where: str, *, fix: bool = False,
                  value: ValueShown = repr) -> tuple[str, str] | None:
    """The most telling problem (jsonschema's best match) as a message, and its key; None when valid."""
    errors = violations(instance, schema)
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors) or errors[0]
    first = problems_of(best, value=value)[0]
    return worded(first, where, fix=fix, more=len(errors) - 1), first.key


def errors_against(instance: Any, name: str) -> list[str]:
    """Every violation of the shipped schema ``name`` (``layout.load_schema``), shallowest first; empty when valid."""
    return [problem.text for problem in schema_problems(instance, load_schema(name))]


def raise_if_invalid(instance: Any, name: str, *, error: type[VllmQualError], where: str, what: str) -> None:
    """Raise ``error`` naming the first violation of the shipped schema ``name`` (and how many more)."""
    problem = first_message(instance, load_schema(name), f"{where} does not match the {what}")
    if problem is not None:
        raise error(problem[0])
