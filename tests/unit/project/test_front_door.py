"""The front door: ``pytest_vllmqual`` re-exports what a conftest, a gate or a script needs,
loads each name on first use (so importing any submodule stays cheap), and the shipped suites
import from nothing else."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys

import pytest
from support import ROOT

import pytest_vllmqual

HEAVY = ("pytest", "httpx", "yaml", "jsonschema", "openai", "docker", "transformers")

FRONT_DOOR = {
    "recipes": ("Recipe", "load_recipe"),
    "the fixtures' types": ("QualClient", "GateRecorder", "GateRecord", "ServerHandle", "ProgressFn"),
    "errors": ("VllmQualError", "CalibrationError", "LaunchError", "RecipeError", "ServerGoneError"),
    "the shipped gates": ("smoke_gate", "json_gate", "tools_gate", "streaming_tool_gate", "tool_continuation_gate",
                          "responses_gate", "openai_sdk_gate", "long_context_gate", "quality_tools_gate",
                          "reasoning_fingerprints_gate", "repeated_check_gate", "concurrency_gate", "ladder_gate",
                          "load_gate", "cold_start_gate", "engine_ranks_gate", "identity_gate", "kv_pool_gate",
                          "equivalence_gate", "items_gate", "tool_replay_gate", "load_floor_gate"),
    "how a suite's test ends on a gate's verdict": ("end_gate",),
    "what a gate returns and what the shipped suites parametrize over": (
        "GateVerdict", "ToolCase", "recipe_tool_fixtures", "shipped_tool_fixtures", "quality_checks",
        "server_memory"),
    "the version": ("__version__",),
}
"""The curated front door, by what a user reaches for: a name is added here on purpose, never by accident."""


def test_every_exported_name_is_the_object_of_its_module() -> None:
    for name in pytest_vllmqual.__all__:
        value = getattr(pytest_vllmqual, name)
        if name == "__version__":
            assert isinstance(value, str)
            continue
        module = importlib.import_module(pytest_vllmqual._MODULE_OF[name])
        assert value is getattr(module, name), name
        assert name in module.__all__, f"{name} is not public in {module.__name__}"
    assert set(pytest_vllmqual._MODULE_OF) | {"__version__"} == set(pytest_vllmqual.__all__)


def test_the_front_door_is_the_curated_list_sorted_with_nothing_private() -> None:
    curated = [name for names in FRONT_DOOR.values() for name in names]
    assert len(curated) == len(set(curated))
    assert sorted(pytest_vllmqual.__all__) == sorted(curated)
    assert pytest_vllmqual.__all__ == sorted(pytest_vllmqual.__all__)
    assert [name for name in pytest_vllmqual.__all__ if name.startswith("_") and name != "__version__"] == []


def test_a_star_import_in_a_fresh_interpreter_gives_exactly_the_front_door() -> None:
    """Every name resolves from a cold start (no other module imported first), and no helper of
    the door itself (its import machinery, its table of modules) comes with ``*``."""
    code = ("import json; namespace = {}; exec('from pytest_vllmqual import *', namespace); "
            "print(json.dumps(sorted(n for n in namespace if n != '__builtins__')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(done.stdout) == sorted(pytest_vllmqual.__all__)


def test_the_readme_names_only_front_door_names_as_exported() -> None:
    """The README's sentence on what the front door exports names no name outside ``__all__``."""
    readme = (ROOT / "README.md").read_text()
    sentence = readme.split("The front door (`pytest_vllmqual`) also exports", 1)[1].split("anything", 1)[0]
    named = re.findall(r"`([A-Za-z_]+)`", sentence)
    assert named and [name for name in named if name not in pytest_vllmqual.__all__] == []


def test_the_version_lives_in_the_foundation_and_matches_the_package_metadata() -> None:
    """Any layer names the version through ``pytest_vllmqual.version``; the front door re-exports it."""
    import tomllib

    from pytest_vllmqual import version

    assert pytest_vllmqual.__version__ is version.__version__
    assert version.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_a_name_outside_the_door_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'check_tool_call'"):
        _ = pytest_vllmqual.check_tool_call  # type: ignore[attr-defined]


def test_importing_a_submodule_loads_nothing_heavy() -> None:
    code = ("import sys, pytest_vllmqual.errors; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    assert done.stdout.strip() == "", f"import pytest_vllmqual.errors loaded {done.stdout.strip()}"


def test_the_shipped_suites_import_only_from_the_front_door() -> None:
    for path in sorted((ROOT / "suites").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_vllmqual"):
                assert node.module == "pytest_vllmqual", f"{path.name}:{node.lineno} imports {node.module}"
            elif isinstance(node, ast.Import):
                inner = [a.name for a in node.names if a.name.startswith("pytest_vllmqual.")]
                assert not inner, f"{path.name}:{node.lineno} imports {inner}"


def test_the_shipped_suites_do_no_work_at_import() -> None:
    """A suite module's top level only imports and defines (the quality checks parametrize their
    tests, so reading them is collection)."""
    for path in sorted((ROOT / "suites").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            assert not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Expr)) \
                or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)), \
                f"{path.name}:{node.lineno} runs code at import"
