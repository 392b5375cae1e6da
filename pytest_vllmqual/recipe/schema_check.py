"""One check of a YAML file against its shipped schema: recipes, fleet files and campaign files.

The schema says what a file may hold; this module turns the first violation into one message
that names the file, the key path and the fix (an unknown key gets its close match, a missing
one its description), and fills the schema's ``default`` values into what was read, so every
file kind has the same wording and the same defaults.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable
from typing import Any

import jsonschema

from pytest_vllmqual.layout import TOP_LEVEL, load_schema
from pytest_vllmqual.layout import key_path as layout_key_path

__all__ = ["checked", "first_problem", "key_path", "problem_text", "with_defaults"]


def key_path(error: jsonschema.ValidationError) -> str:
    """The key path of a violation (``jobs.0.placement``), or ``(top level)``: ``layout.key_path``'s spelling."""
    return layout_key_path(error.absolute_path)


def _below(key: str, name: str) -> str:
    return name if key == TOP_LEVEL else f"{key}.{name}"


def _described(schema: Any) -> str:
    return f" ({schema['description']})" if isinstance(schema, dict) and schema.get("description") else ""


def problem_text(where: str, error: jsonschema.ValidationError) -> tuple[str, str]:
    """One violation as a message naming ``where`` (the file), the key path and the fix; and that key."""
    key = key_path(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extras = sorted(set(error.instance) - set(allowed))
        full = _below(key, extras[0] if extras else "?")
        close = difflib.get_close_matches(extras[0], allowed, n=1) if extras else []
        fix = f"rename it to {close[0]!r}" if close else f"remove it; allowed keys here: {', '.join(allowed)}"
        return f"{where}: unknown key {full!r}. Fix: {fix}.", full
    if error.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", error.message)
        name = missing[0] if missing else "?"
        full = _below(key, name)
        described = _described((error.schema.get("properties") or {}).get(name))
        return f"{where}: missing required key {full!r}{described}. Fix: add it.", full
    if error.validator == "type":
        expected = error.validator_value
        text = " or ".join(expected) if isinstance(expected, list) else str(expected)
        article = "an" if text[:1] in "aeiou" else "a"
        return (f"{where}: key {key!r} must be of type {text}, got {type(error.instance).__name__} "
                f"{error.instance!r}. Fix: write {article} {text} value for {key!r}.", key)
    if error.validator == "enum":
        return (f"{where}: key {key!r} is {error.instance!r}, which is not one of "
                f"{', '.join(map(str, error.validator_value))}. Fix: use one of those values.", key)
    if error.validator == "pattern":
        return (f"{where}: key {key!r} is {error.instance!r}, which does not have the form "
                f"{error.validator_value!r}. Fix: write it in that form{_described(error.schema)}.", key)
    return f"{where}: key {key!r}: {error.message}. Fix: correct the value of {key!r}.", key


def first_problem(instance: Any, schema: dict[str, Any], *, where: str) -> tuple[str, str] | None:
    """The most telling violation (message, key), saying how many more follow; None when valid."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(list(e.absolute_path)), e.message))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors) or errors[0]
    message, key = problem_text(where, best)
    if len(errors) > 1:
        message += f" ({len(errors) - 1} more problem(s) in this file after this one is fixed.)"
    return message, key


def with_defaults(schema: dict[str, Any], data: Any) -> Any:
    """``data`` with the schema's ``default`` values filled in where a key is absent: in every
    mapping the schema describes, and in every item of a list (a copy; the schema is not shared)."""
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(schema["items"], item) for item in data]
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = with_defaults(sub, out[key])
    return out


def checked(instance: Any, schema_name: str, *, where: str, fail: Callable[[str, str], Exception]) -> dict[str, Any]:
    """``instance`` checked against the shipped schema ``schema_name``, with its defaults filled in;
    on a violation raises ``fail(message, key)`` (the caller's error type, naming ``where``)."""
    schema = load_schema(schema_name)
    problem = first_problem(instance, schema, where=where)
    if problem is not None:
        raise fail(*problem)
    filled: dict[str, Any] = with_defaults(schema, instance)
    return filled
