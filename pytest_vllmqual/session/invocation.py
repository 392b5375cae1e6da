"""How the run was asked for, said back: the line that reproduces an arm, the terminal header,
and the order its tests run in."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_vllmqual.launch.registry import serving_kind
from pytest_vllmqual.recipe.model import Recipe

from .gate_order import run_rank

__all__ = ["PATH_PLACEHOLDER", "RECIPE_FLAGS", "SortKeyFn", "header_lines", "local_path_shown", "order_of_tests", "reproduce_line"]

SortKeyFn = Callable[[str, "str | None"], tuple[int, int]]
"""The sort key of a test from its arm key and gate name (None: not a gate)."""


RECIPE_FLAGS = ("--recipe", "--vllmqual-recipe")
"""The options that choose the recipe; the reproduce line pins the arm's recipe instead."""
PATH_PLACEHOLDER = "<path>"
"""What the reproduce line shows for an absolute path outside the run's directory."""


def reproduce_line(invocation_args: Sequence[str], recipe_ref: str, *, discovered: bool,
                   run_dir: Path | None = None) -> str:
    """The pytest command line that runs an arm again: the same arguments with the recipe pinned to
    ``recipe_ref`` (its name, or its path when it came from a file), while a discovered recipe is
    rediscovered from the same endpoint instead.

    An absolute path is shown relative to ``run_dir`` (the directory pytest ran in) when it lies
    inside it, else as ``<path>``: the line reproduces the run without saying where things live."""
    args = [local_path_shown(arg, run_dir) for arg in invocation_args]
    if discovered:
        return shlex.join(["pytest", *args])
    kept: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
        elif arg in RECIPE_FLAGS:
            skip_next = True  # "--recipe NAME": the name is the next argument
        elif not arg.startswith(tuple(f"{flag}=" for flag in RECIPE_FLAGS)):
            kept.append(arg)
    return shlex.join(["pytest", f"--recipe={recipe_ref}", *kept])


def local_path_shown(arg: str, run_dir: Path | None) -> str:
    """``arg`` with an absolute path in it (the whole argument, or the value of ``--opt=/x`` or
    ``key=/x``) made relative to ``run_dir``, or replaced by the placeholder."""
    if arg.startswith("/"):
        return _relative_or_placeholder(arg, run_dir)
    head, equals, value = arg.partition("=")
    if equals and value.startswith("/"):
        return f"{head}={_relative_or_placeholder(value, run_dir)}"
    return arg


def _relative_or_placeholder(path: str, run_dir: Path | None) -> str:
    if run_dir is not None:
        for base, target in ((os.path.normpath(run_dir), os.path.normpath(path)),
                             (os.path.realpath(run_dir), os.path.realpath(path))):
            if target == base:
                return "."
            if target.startswith(base.rstrip("/") + "/"):
                return os.path.relpath(target, base)
    return PATH_PLACEHOLDER


def header_lines(recipe: Recipe, *, recipe_source: str, endpoint: object, reproduce: str) -> list[str]:
    """What the terminal header says: the recipe, its identity and how to reproduce the run."""
    pin_file = recipe.identity.content_digest_file
    content = recipe.identity.content_digest or (f"from {Path(pin_file).name}" if pin_file else None)
    rev = recipe.identity.revision or (f"content {content}" if content else "unpinned")
    image = recipe.identity.image or "no image (subprocess)"
    launcher = serving_kind(recipe.launcher.kind, str(endpoint) if endpoint else None)
    lines = [
        f"vllmqual: recipe {recipe.name} ({recipe.path}, sha256 {recipe.sha256[:12]}) chosen by {recipe_source}",
        f"vllmqual: identity {recipe.identity.checkpoint}@{rev}, {image}, runtime {recipe.identity.runtime_version}, "
        f"served as {recipe.identity.served_model_name}; launcher {launcher}; "
        f"TP={recipe.serve.tensor_parallel_size} max_model_len={recipe.serve.max_model_len}",
        f"vllmqual: reproduce with: {reproduce}",
    ]
    if recipe.discovered:
        lines.insert(1, "vllmqual: the recipe was DISCOVERED from the endpoint, not pinned: gates record what "
                        "they measure; thresholds only a pinned recipe knows are not checked")
    if recipe.overrides:
        lines.insert(1, f"vllmqual: overrides {', '.join(recipe.overrides)} -> effective recipe sha256 {recipe.sha256}")
    return lines


def order_of_tests(plan_keys: Sequence[str], default_key: str, arm_keys: Sequence[str]) -> SortKeyFn:
    """Arms in plan order (then the session recipe, then the arms as collected), each arm's tests
    together so its server starts once, cheapest gates first within an arm."""
    order: dict[str, int] = {key: i for i, key in enumerate(plan_keys)}
    for key in [default_key, *arm_keys]:
        order.setdefault(key, len(order))
    return lambda arm, gate: (order[arm], run_rank(gate))
