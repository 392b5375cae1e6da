"""pytest_vllmqual: LLM serve qualification as pytest tests.

The front door: what a conftest, a gate or a script needs, importable from here::

    from pytest_vllmqual import GateRecorder, QualClient, Recipe

- recipes: ``Recipe`` and ``load_recipe``;
- the types of the fixtures: ``Recipe`` (``recipe``), ``GateRecorder`` (``gate``, which fills a
  ``GateRecord``), ``QualClient`` (``qual_client``), ``ServerHandle`` (``vllm_server``),
  ``ProgressFn`` (``progress``);
- the errors a gate or a conftest may catch, all derived from ``VllmQualError``;
- the shipped gates, one function each (``smoke_gate`` ... ``kv_pool_gate``): each sends the
  gate's requests, writes its measurements and returns a ``GateVerdict``. The tests in the
  shipped suites are one call and one assertion each; a suite of your own can call them too.

Every module imports this package first, so nothing heavy is imported here: each name is
loaded from its module on first use (``import pytest_vllmqual.errors`` stays as cheap as the
errors module itself).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_vllmqual.version import __version__

if TYPE_CHECKING:
    from pytest_vllmqual.client.qual_client import QualClient
    from pytest_vllmqual.equivalence import server_memory
    from pytest_vllmqual.errors import (
        CalibrationError,
        LaunchError,
        RecipeError,
        ServerGoneError,
        VllmQualError,
    )
    from pytest_vllmqual.gates.engine import cold_start_gate, engine_ranks_gate, identity_gate, kv_pool_gate
    from pytest_vllmqual.gates.equivalence import equivalence_gate
    from pytest_vllmqual.gates.functional import (
        json_gate,
        openai_sdk_gate,
        responses_gate,
        smoke_gate,
        streaming_tool_gate,
        tool_continuation_gate,
        tools_gate,
    )
    from pytest_vllmqual.gates.items import items_gate
    from pytest_vllmqual.gates.ladder import concurrency_gate, ladder_gate
    from pytest_vllmqual.gates.load import load_gate
    from pytest_vllmqual.gates.load_floor import load_floor_gate
    from pytest_vllmqual.gates.quality import (
        long_context_gate,
        quality_checks,
        quality_tools_gate,
        reasoning_fingerprints_gate,
        repeated_check_gate,
    )
    from pytest_vllmqual.gates.recorder import GateRecorder
    from pytest_vllmqual.gates.tool_fixtures import ToolCase, recipe_tool_fixtures, shipped_tool_fixtures
    from pytest_vllmqual.gates.tool_replay import tool_replay_gate
    from pytest_vllmqual.gates.verdict import GateVerdict
    from pytest_vllmqual.launch.base import ProgressFn, ServerHandle
    from pytest_vllmqual.plugin import end_gate
    from pytest_vllmqual.recipe.loader import load_recipe
    from pytest_vllmqual.recipe.model import Recipe
    from pytest_vllmqual.records import GateRecord

_EXPORTS: dict[str, tuple[str, ...]] = {
    "pytest_vllmqual.recipe.model": ("Recipe",),
    "pytest_vllmqual.recipe.loader": ("load_recipe",),
    "pytest_vllmqual.client.qual_client": ("QualClient",),
    "pytest_vllmqual.gates.recorder": ("GateRecorder",),
    "pytest_vllmqual.records": ("GateRecord",),
    "pytest_vllmqual.launch.base": ("ProgressFn", "ServerHandle"),
    "pytest_vllmqual.errors": ("CalibrationError", "LaunchError", "RecipeError", "ServerGoneError",
                               "VllmQualError"),
    "pytest_vllmqual.gates.verdict": ("GateVerdict",),
    "pytest_vllmqual.plugin": ("end_gate",),
    "pytest_vllmqual.gates.tool_fixtures": ("ToolCase", "recipe_tool_fixtures", "shipped_tool_fixtures"),
    "pytest_vllmqual.gates.functional": ("json_gate", "openai_sdk_gate", "responses_gate", "smoke_gate",
                                         "streaming_tool_gate", "tool_continuation_gate", "tools_gate"),
    "pytest_vllmqual.gates.quality": ("long_context_gate", "quality_checks", "quality_tools_gate",
                                      "reasoning_fingerprints_gate", "repeated_check_gate"),
    "pytest_vllmqual.gates.ladder": ("concurrency_gate", "ladder_gate"),
    "pytest_vllmqual.gates.load": ("load_gate",),
    "pytest_vllmqual.gates.load_floor": ("load_floor_gate",),
    "pytest_vllmqual.gates.engine": ("cold_start_gate", "engine_ranks_gate", "identity_gate", "kv_pool_gate"),
    "pytest_vllmqual.gates.equivalence": ("equivalence_gate",),
    "pytest_vllmqual.gates.items": ("items_gate",),
    "pytest_vllmqual.gates.tool_replay": ("tool_replay_gate",),
    "pytest_vllmqual.equivalence": ("server_memory",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "CalibrationError",
    "GateRecord",
    "GateRecorder",
    "GateVerdict",
    "LaunchError",
    "ProgressFn",
    "QualClient",
    "Recipe",
    "RecipeError",
    "ServerGoneError",
    "ServerHandle",
    "ToolCase",
    "VllmQualError",
    "__version__",
    "cold_start_gate",
    "concurrency_gate",
    "end_gate",
    "engine_ranks_gate",
    "equivalence_gate",
    "identity_gate",
    "items_gate",
    "json_gate",
    "kv_pool_gate",
    "ladder_gate",
    "load_floor_gate",
    "load_gate",
    "load_recipe",
    "long_context_gate",
    "openai_sdk_gate",
    "quality_checks",
    "quality_tools_gate",
    "reasoning_fingerprints_gate",
    "recipe_tool_fixtures",
    "repeated_check_gate",
    "responses_gate",
    "server_memory",
    "shipped_tool_fixtures",
    "smoke_gate",
    "streaming_tool_gate",
    "tool_continuation_gate",
    "tool_replay_gate",
    "tools_gate",
]


def __getattr__(name: str) -> Any:
    """Load a front-door name from its module on first use (then it is a plain attribute)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
