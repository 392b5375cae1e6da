"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest
from support import recipes

from pytest_vllmqual.recipe.loader import Recipe


@pytest.fixture(name="tiny")
def tiny_recipe() -> Recipe:
    """The tiny-cpu recipe (``support.recipes.tiny``)."""
    return recipes.tiny()
