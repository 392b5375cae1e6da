"""The one schema loader: the JSON Schemas shipped in ``pytest_vllmqual/schemas/``.

Every schema (report, comparison, recipe) is read from the installed package by file name,
parsed once (JSON, or YAML for ``.yaml``) and cached; :func:`schema_errors` validates an
instance with Draft 2020-12 and phrases each violation as "key.path: message", best first,
so the report and the comparison name their problems the same way.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

from .errors import VllmQualError

__all__ = ["COMPARISON_SCHEMA", "RECIPE_SCHEMA", "REPORT_SCHEMA", "load_schema", "raise_if_invalid", "schema_errors"]

REPORT_SCHEMA = "report.schema.json"
COMPARISON_SCHEMA = "comparison.schema.json"
RECIPE_SCHEMA = "recipe.schema.yaml"


@lru_cache(maxsize=8)
def load_schema(name: str) -> dict[str, Any]:
    """The shipped schema ``schemas/<name>`` as a dict (cached: callers must not mutate it)."""
    text = resources.files("pytest_vllmqual").joinpath("schemas", name).read_text(encoding="utf-8")
    schema: dict[str, Any] = yaml.safe_load(text) if name.endswith((".yaml", ".yml")) else json.loads(text)
    return schema


def schema_errors(instance: Any, name: str) -> list[str]:
    """Every violation of schema ``name`` as "key.path: message", shallowest first; empty when valid."""
    validator = jsonschema.Draft202012Validator(load_schema(name))
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(list(e.absolute_path)), e.message))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}" for e in errors]


def raise_if_invalid(instance: Any, name: str, *, error: type[VllmQualError], where: str, what: str) -> None:
    """Raise ``error`` naming the first violation of schema ``name`` (and how many more)."""
    problems = schema_errors(instance, name)
    if problems:
        more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
        raise error(f"{where} does not match the {what}: {problems[0]}{more}")
