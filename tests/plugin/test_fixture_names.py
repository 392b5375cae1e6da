"""Users' own gates: one name per fixture (``recipe``, ``gate``, ``qual_client``,
``server_facts``, ``progress``, ``vllm_server``, ``vllmqual_arm``), the types imported from the
front door, and a conftest that brings its own ``vllm_server`` instead of the recipe's managed
one (no server is started). The ``vllmqual_*`` aliases were removed before any release
promised them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import pytest_vllmqual.fixtures as fixtures
import pytest_vllmqual.plugin as plugin

PUBLIC_FIXTURES = {"recipe", "gate", "qual_client", "server_facts", "progress", "vllm_server", "vllmqual_arm"}
PRIVATE_FIXTURES = {"_vllmqual_server_alive", "_vllmqual_traffic_isolation"}
REMOVED = ("vllmqual_recipe", "vllmqual_gate", "vllmqual_client", "vllmqual_server_facts", "vllmqual_progress")

CONFTEST = '''
import pytest
from pytest_vllmqual import ServerHandle

@pytest.fixture
def vllm_server():
    return ServerHandle(base_url="http://127.0.0.1:9", served_model_name="mine", launcher_kind="external")
'''

GATE = '''
from pytest_vllmqual import GateRecorder, ProgressFn, Recipe, ServerHandle

def test_own_gate(vllm_server: ServerHandle, recipe: Recipe, gate: GateRecorder, progress: ProgressFn) -> None:
    assert vllm_server.served_model_name == "mine"
    assert recipe.name == "tiny-cpu"
    gate.measure(own=1)
    gate.summary("own gate")
    progress("own gate ran")
'''


def _fixtures_of(module: object) -> set[str]:
    """The names of the fixtures a module defines, read from its source."""
    tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                "fixture" in ast.unparse(decorator) for decorator in node.decorator_list):
            names.add(node.name)
    return names


def test_each_fixture_has_one_name() -> None:
    assert _fixtures_of(fixtures) == PUBLIC_FIXTURES | PRIVATE_FIXTURES
    assert _fixtures_of(plugin) == set(), "plugin.py holds the hooks, fixtures.py the fixtures"
    assert PUBLIC_FIXTURES == set(fixtures.__all__) and not set(REMOVED) & set(fixtures.__all__)
    assert plugin.pytest_plugins == ["pytest_vllmqual.fixtures"]  # registered (and blocked) with the plugin


def test_the_fixtures_docstring_names_every_public_fixture_and_no_alias() -> None:
    doc = fixtures.__doc__ or ""
    assert all(f"``{name}``" in doc for name in PUBLIC_FIXTURES), doc
    assert not any(name in doc for name in REMOVED), doc


def test_own_gate_with_the_front_door_types_and_an_overridden_server(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_own=GATE)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", f"--vllmqual-reports-dir={reports}",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*[[]vllmqual[]] own gate ran*"])
    assert "started" not in result.stdout.str(), "the overridden vllm_server must not boot the recipe's server"
    (path,) = reports.glob("tiny-cpu-*.json")
    (gate,) = json.loads(path.read_text())["gates"]
    assert gate["gate"] == "own_gate" and gate["measurements"] == {"own": 1} and gate["summary"] == "own gate"


def test_a_removed_alias_is_not_a_fixture(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_old="def test_old(vllmqual_gate):\n    pass\n")
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", f"--vllmqual-reports-dir={pytester.path / 'r'}",
                                           "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*fixture 'vllmqual_gate' not found*"])
