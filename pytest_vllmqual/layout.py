"""Where the gates, recipes and fixtures are: a checkout, or the installed package.

The repository keeps ``suites/`` and ``fixtures/`` at its top level, as users were promised; the
wheel maps both into the package at build time (``pytest_vllmqual/suites``, importable for
``--pyargs``, and ``pytest_vllmqual/data/fixtures``), so below the *data root* (the checkout,
or ``pytest_vllmqual/data``) ``fixtures/`` looks the same in both cases. The data root is a
folder of its own because processes start there (the fixture-model builder puts it on
``sys.path``): the package folder on ``sys.path`` could shadow a standard-library module with
one of ours. The only writable thing under ``fixtures/`` is the fixture model's build output;
outside a checkout it goes to the user cache instead of site-packages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import VllmQualError

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_DATA = PACKAGE_DIR / "data"
CACHE_ENV = "VLLMQUAL_CACHE_DIR"
FIXTURE_BUILD = Path("fixtures") / "model" / "build"


def checkout_root() -> Path | None:
    """The repository root when this package is imported from a checkout, else None."""
    root = PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "suites").is_dir() and (root / "fixtures" / "recipes").is_dir():
        return root
    return None


def data_root() -> Path:
    """The directory holding ``fixtures/``: the checkout, else ``pytest_vllmqual/data``."""
    return checkout_root() or PACKAGE_DATA


def suites_dir() -> Path:
    """The gates: the checkout's ``suites/``, else the package ``pytest_vllmqual.suites``."""
    root = checkout_root()
    return root / "suites" if root is not None else PACKAGE_DIR / "suites"


def fixtures_dir() -> Path:
    return data_root() / "fixtures"


def shipped_recipes_dir() -> Path:
    return fixtures_dir() / "recipes"


def shipped_campaigns_dir() -> Path:
    return fixtures_dir() / "campaigns"


def user_cache_root(env: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: where this user's tools keep their caches (ours in
    ``vllmqual/``, vLLM's in ``vllm/``)."""
    env = dict(os.environ) if env is None else env
    xdg = env.get("XDG_CACHE_HOME")
    return Path(xdg).expanduser() if xdg else Path.home() / ".cache"


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """``$VLLMQUAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/vllmqual``, else ``~/.cache/vllmqual``."""
    env = dict(os.environ) if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    return user_cache_root(env) / "vllmqual"


def fixture_model_build_dir(env: dict[str, str] | None = None) -> Path:
    """Where fixture models are built: ``fixtures/model/build`` in a checkout, else the cache."""
    root = checkout_root()
    if root is not None:
        return root / FIXTURE_BUILD
    return cache_dir(env) / "models"


def expand_placeholders(part: str) -> str:
    """``{python}`` (this interpreter) and ``{fixture_models}`` (``fixture_model_build_dir``) in a
    recipe's ``prepare`` argv."""
    import sys

    return part.replace("{python}", sys.executable).replace("{fixture_models}", str(fixture_model_build_dir()))


def resolve_project_path(project_root: Path, relative: Path) -> Path:
    """A recipe's relative path (e.g. ``model_path``) under its project root.

    For a recipe shipped in the installed package, ``fixtures/model/build/...`` is the fixture
    model's build output, which lives in the user cache rather than in site-packages.
    """
    if project_root.resolve() == PACKAGE_DATA and checkout_root() is None:
        try:
            rest = relative.relative_to(FIXTURE_BUILD)
        except ValueError:
            pass
        else:
            return fixture_model_build_dir() / rest
    return project_root / relative


def is_shipped_suite(path: Path) -> bool:
    """Whether ``path`` lies in the shipped gates (the checkout's ``suites/`` or the package's)."""
    try:
        resolved = path.resolve()
    except OSError:
        return False
    for directory in {suites_dir(), PACKAGE_DIR / "suites"}:
        if resolved == directory or directory in resolved.parents:
            return True
    return False


def names_shipped_gates(args: list[str], *, pyargs: bool, base: Path) -> bool:
    """Whether pytest's arguments name the shipped gates (``--pyargs pytest_vllmqual.suites`` or
    a path into them): running them is an explicit ask for the plugin."""
    for arg in args:
        target = arg.split("::", 1)[0]
        if pyargs and (target == "pytest_vllmqual" or target.startswith("pytest_vllmqual.suites")):
            return True
        if target and is_shipped_suite(base / target):
            return True
    return False


# The JSON Schemas shipped in ``pytest_vllmqual/schemas/``: read by file name, parsed once (JSON, or
# YAML for ``.yaml``) and cached; violations phrased "key.path: message", best first.

REPORT_SCHEMA = "report.schema.json"
COMPARISON_SCHEMA = "comparison.schema.json"
RECIPE_SCHEMA = "recipe.schema.yaml"


@lru_cache(maxsize=8)
def load_schema(name: str) -> dict[str, Any]:
    """The shipped schema ``schemas/<name>`` as a dict (cached: callers must not mutate it)."""
    text = resources.files("pytest_vllmqual").joinpath("schemas", name).read_text(encoding="utf-8")
    schema: dict[str, Any] = yaml.safe_load(text) if name.endswith((".yaml", ".yml")) else json.loads(text)
    return schema


TOP_LEVEL = "(top level)"
"""The key path of a whole document or value, in every schema message."""


def key_path(parts: Iterable[object]) -> str:
    """A key path as every schema message of the package spells it: keys and list positions
    joined by dots, as a recipe's keys and ``--vllmqual-set`` are written (``jobs.0.placement``),
    or ``(top level)`` for the value itself."""
    text = ".".join(str(part) for part in parts)
    return text or TOP_LEVEL


def schema_errors(instance: Any, name: str) -> list[str]:
    """Every violation of schema ``name``, shallowest first; empty when valid: ``schema_errors.errors_against``,
    which words every schema violation (kept here for the callers of earlier releases)."""
    from pytest_vllmqual.schema_errors import errors_against  # that module reads key_path from here
    return errors_against(instance, name)


def raise_if_invalid(instance: Any, name: str, *, error: type[VllmQualError], where: str, what: str) -> None:
    """``schema_errors.raise_if_invalid`` (kept here for the callers of earlier releases)."""
    from pytest_vllmqual.schema_errors import raise_if_invalid as raise_first
    raise_first(instance, name, error=error, where=where, what=what)

__all__ = ["CACHE_ENV", "COMPARISON_SCHEMA", "RECIPE_SCHEMA", "REPORT_SCHEMA", "TOP_LEVEL", "checkout_root", "data_root", "expand_placeholders", "fixture_model_build_dir", "fixtures_dir", "is_shipped_suite", "key_path", "load_schema", "names_shipped_gates", "raise_if_invalid", "resolve_project_path", "schema_errors", "shipped_campaigns_dir", "shipped_recipes_dir", "suites_dir", "user_cache_root"]
