"""The front door: ``pytest_vllmqual`` re-exports what a conftest, a gate or a script needs,
loads each name on first use (so importing any submodule stays cheap), and the shipped suites
import from nothing else."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest
from support import ROOT

import pytest_vllmqual

HEAVY = ("pytest", "httpx", "yaml", "jsonschema", "openai", "docker", "transformers")


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
