"""The typed tools the tool gates call: the fixtures file of a recipe (or the shipped one), read
once per file version, because the gates read it right after a request, when CPU is scarce."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.model import Recipe

__all__ = ["ToolCase", "load_tool_fixtures", "recipe_tool_fixtures", "recipe_tool_fixtures_path", "shipped_tool_fixtures"]


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
