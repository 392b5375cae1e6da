"""How the run was asked for, said back: the line that reproduces an arm, the terminal header,
and the order its tests run in."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from pytest_vllmqual.recipe.loader import Recipe

from .gate_order import run_rank

__all__ = ["SortKeyFn", "header_lines", "order_of_tests", "reproduce_line"]

SortKeyFn = Callable[[str, "str | None"], tuple[int, int]]
"""The sort key of a test from its arm key and gate name (None: not a gate)."""


def reproduce_line(invocation_args: Sequence[str], recipe_name: str, *, discovered: bool) -> str:
    """The pytest command line that runs arm ``recipe_name`` again: the same arguments with the
    recipe pinned (a discovered recipe is rediscovered from the same endpoint instead)."""
    if discovered:
        return shlex.join(["pytest", *invocation_args])
    kept: list[str] = []
    skip_next = False
    for arg in (a for a in invocation_args if not a.startswith("--recipe")):
        if skip_next:
            skip_next = False
            continue
        if arg == "--recipe":
            skip_next = True
            continue
        kept.append(arg)
    return shlex.join(["pytest", f"--recipe={recipe_name}", *kept])


def header_lines(recipe: Recipe, *, recipe_source: str, endpoint: object, reproduce: str) -> list[str]:
    """What the terminal header says: the recipe, its identity and how to reproduce the run."""
    rev = recipe.identity.revision or "unpinned"
    image = recipe.identity.image or "no image (subprocess)"
    launcher = "external" if endpoint else recipe.launcher.kind
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
