"""The repository's recipes as the tests load them."""

from __future__ import annotations

from pytest_vllmqual.recipe.loader import Recipe, load_recipe
from support import ROOT

__all__ = ["RECIPES", "tiny"]

RECIPES = ROOT / "fixtures" / "recipes"


def tiny() -> Recipe:
    """The tiny-cpu recipe, loaded afresh for each call (a test may build a changed copy of it)."""
    return load_recipe(RECIPES / "tiny-cpu.yaml")
