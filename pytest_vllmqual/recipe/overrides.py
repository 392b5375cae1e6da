"""``--vllmqual-set KEY=VALUE``: a recipe with some keys changed, validated again.

The effective recipe is checked by the same schema and rules as a file, and its SHA-256 is taken
over its canonical YAML, so a report says exactly which recipe ran.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace
from typing import Any

import yaml

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.loader import check_rules, typed_recipe, validate_raw
from pytest_vllmqual.recipe.model import Recipe

__all__ = ["effective_yaml", "parse_override", "with_overrides"]


def parse_override(text: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` with a dotted key and a YAML value (``serve.max_num_seqs=4``)."""
    key, sep, value = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not sep or not parts:
        raise RecipeError(f"--vllmqual-set {text!r} is not KEY=VALUE. Fix: e.g. --vllmqual-set serve.max_num_seqs=4 "
                          "or --vllmqual-set launcher.docker.model_cache=/data/hf.", key=key)
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return parts, parsed


def with_overrides(recipe: Recipe, overrides: list[str] | tuple[str, ...]) -> Recipe:
    """The recipe with ``--vllmqual-set`` overrides applied, validated again; its sha256 is the
    SHA-256 of the effective recipe (canonical YAML), ``file_sha256`` that of the file."""
    if not overrides:
        return recipe
    raw = deepcopy(recipe.raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = raw
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise RecipeError(f"--vllmqual-set {text!r}: {'.'.join(parts[:i + 1])!r} in recipe {recipe.path} is "
                                  f"not a mapping. Fix: set a key that exists in the recipe schema.",
                                  path=str(recipe.path), key=".".join(parts))
            node = child
        node[parts[-1]] = value
    try:
        raw = validate_raw(recipe.path, raw)
        check_rules(recipe.path, raw)
    except RecipeError as exc:
        raise RecipeError(f"{exc} (after --vllmqual-set {', '.join(overrides)})", path=str(recipe.path)) from None
    data = effective_yaml(raw).encode()
    typed = typed_recipe(recipe.path, data, raw)
    return replace(typed, overrides=tuple(overrides), file_sha256=recipe.sha256)


def effective_yaml(raw: dict[str, Any]) -> str:
    """The canonical YAML of a recipe mapping (what the effective SHA-256 is taken over)."""
    return yaml.safe_dump(raw, sort_keys=True, default_flow_style=False)
