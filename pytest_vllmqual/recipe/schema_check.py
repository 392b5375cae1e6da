"""One check of a YAML file against its shipped schema: recipes, fleet files and campaign files.

The schema says what a file may hold; this module turns the first violation into one message
that names the file, the key path and the fix (``schema_errors``, the wording of every schema
message of the package: an unknown key gets its close match, a missing one its description), and fills the schema's ``default`` values into what was read, so every
file kind has the same wording and the same defaults.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonschema

from pytest_vllmqual.layout import load_schema
from pytest_vllmqual.schema_errors import error_key as key_path
from pytest_vllmqual.schema_errors import first_message, problems_of, worded

__all__ = ["checked", "first_problem", "key_path", "problem_text", "with_defaults"]


def problem_text(where: str, error: jsonschema.ValidationError) -> tuple[str, str]:
    """One violation as a message naming ``where`` (the file), the key path and the fix; and that key
    (``schema_errors``' wording, as every schema message of the package)."""
    problem = problems_of(error)[0]
    return worded(problem, where, fix=True), problem.key


def first_problem(instance: Any, schema: dict[str, Any], *, where: str) -> tuple[str, str] | None:
    """The most telling violation (message, key), saying how many more follow; None when valid."""
    return first_message(instance, schema, where, fix=True)


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
