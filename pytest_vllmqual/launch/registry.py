"""Which launcher class brings up which ``launcher.kind``: one table, as pytest-xdist picks its
scheduler from one.

The built-in kinds are listed here. A launcher from outside the package is added without
editing it: an installed package names its class in the ``pytest_vllmqual.launchers``
entry-point group (the entry's name is the kind), and a conftest returns its classes from the
``pytest_vllmqual_launchers`` hook, which the plugin passes to :func:`register`.

The table holds names (``module:Class``, as an entry point does) and imports a class on first
use, so it sits below the launchers in the layers: the recipe loader asks it whether a kind is
registered, and what a recipe must say for it, without importing a launcher it does not run
(the docker launcher needs the Docker SDK only to start a container).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from pytest_vllmqual.errors import RecipeError, VllmQualError
from pytest_vllmqual.records import LauncherKind

__all__ = [
    "ENTRY_POINT_GROUP",
    "LauncherClass",
    "RecipeProblem",
    "kind_word",
    "launcher_class",
    "register",
    "registered_kinds",
    "serving_kind",
    "unregister",
]

ENTRY_POINT_GROUP = "pytest_vllmqual.launchers"
"""The entry-point group an installed package names its launcher classes in (name = kind)."""

_BUILT_IN: dict[str, str] = {
    LauncherKind.SUBPROCESS: "pytest_vllmqual.launch.local_process:SubprocessLauncher",
    LauncherKind.DOCKER: "pytest_vllmqual.launch.docker.kind:DockerKind",
    LauncherKind.EXTERNAL: "pytest_vllmqual.launch.external:ExternalLauncher",
}
_added: dict[str, Any] = {}
"""Kinds registered in this process (a conftest's hook), each a class."""


@dataclass(frozen=True)
class RecipeProblem:
    """Why a recipe cannot run under a launcher: the recipe key at fault and what to write there."""

    key: str
    message: str


class LauncherClass(Protocol):
    """What the package asks of a launcher class without starting anything (``launch.base.Launcher``)."""

    kind: str
    runs_container: bool
    starts_server: bool

    def create(self, recipe: Any, *, run_id: str, artifacts_dir: Path, api_key: str | None,
               endpoint: str | None) -> Any: ...

    def recipe_problem(self, raw: Mapping[str, Any]) -> RecipeProblem | None: ...

    def unpinned_reason(self, raw: Mapping[str, Any]) -> RecipeProblem | None: ...

    def command_line(self, recipe: Any) -> list[str]: ...

    def command_line_note(self) -> str | None: ...

    def model_argument(self, recipe: Any) -> str | None: ...


def register(cls: Any) -> None:
    """Add a launcher class under its ``kind``. Registering the same class again is harmless (a
    conftest read afresh by a second session in one process gives a new class of the same name,
    which replaces the first); another class under a kind already taken is refused (the first
    would be silently replaced)."""
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise VllmQualError(f"launcher {cls!r} has no 'kind' (the word a recipe's launcher.kind names it by). "
                            "Fix: set the class attribute kind = 'my-kind'.")
    taken = _added.get(kind) or _named(kind)
    if taken is not None and _reference(cls) != _shown(taken):
        raise VllmQualError(f"launcher kind {kind!r} is already registered by {_shown(taken)}; {_shown(cls)} cannot "
                            "take it. Fix: give the new launcher another kind.")
    _added[str(kind)] = cls


def unregister(kind: str) -> None:
    """Forget a kind registered in this process (tests; a conftest's kinds end with its session)."""
    _added.pop(kind, None)


def registered_kinds() -> list[str]:
    """Every kind a recipe may name, built-in first."""
    return list(dict.fromkeys([*_BUILT_IN, *sorted(_entry_points()), *sorted(_added)]))


def launcher_class(kind: str) -> LauncherClass:
    """The launcher class of ``kind``; a RecipeError naming the registered kinds for any other word."""
    found = _added.get(kind) or _named(kind)
    if found is None:
        raise RecipeError(f"key 'launcher.kind' is {kind!r}, which no launcher is registered for (registered: "
                          f"{', '.join(registered_kinds())}). Fix: name one of those, or register the launcher "
                          f"(the {ENTRY_POINT_GROUP} entry-point group of an installed package, or the "
                          "pytest_vllmqual_launchers hook in a conftest).", key="launcher.kind")
    cls: LauncherClass = _load(found) if isinstance(found, str) else found
    if cls.kind != kind:
        raise VllmQualError(f"launcher {_shown(found)} is registered for kind {kind!r} but says its kind is "
                            f"{cls.kind!r}. Fix: name the entry point after the class's kind.")
    return cls


def kind_word(kind: str) -> str:
    """The kind as the recipe holds it: a ``LauncherKind`` for a built-in, else the registered word."""
    return LauncherKind(kind) if kind in LauncherKind._value2member_map_ else kind


def serving_kind(recipe_kind: str, endpoint: str | None) -> str:
    """The kind that serves a run: an endpoint the user named overrides the recipe's launcher."""
    return LauncherKind.EXTERNAL if endpoint else recipe_kind


def _named(kind: str) -> str | None:
    return _BUILT_IN.get(kind) or _entry_points().get(kind)


def _entry_points() -> dict[str, str]:
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def _load(reference: str) -> Any:
    module, _, name = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise VllmQualError(f"launcher {reference!r} cannot be loaded ({exc}). Fix: install the package that "
                            "provides it, or correct its entry point.") from None


def _reference(cls: Any) -> str:
    return f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', '?')}"


def _shown(entry: Any) -> str:
    return entry if isinstance(entry, str) else _reference(entry)
