"""Users' own gates: the prefixed fixtures (``vllmqual_*``) and a conftest that brings its own
``vllm_server`` instead of the recipe's managed one (no server is started)."""

from __future__ import annotations

import json

import pytest

CONFTEST = '''
import pytest
from pytest_vllmqual.launch.base import ServerHandle

@pytest.fixture
def vllm_server():
    return ServerHandle(base_url="http://127.0.0.1:9", served_model_name="mine", launcher_kind="external")
'''

GATE = '''
def test_own_gate(vllm_server, vllmqual_recipe, vllmqual_gate, vllmqual_progress):
    assert vllm_server.served_model_name == "mine"
    assert vllmqual_recipe.name == "tiny-cpu"
    vllmqual_gate.measure(own=1)
    vllmqual_gate.summary("own gate")
    vllmqual_progress("own gate ran")
'''


def test_prefixed_fixtures_and_an_overridden_server(pytester: pytest.Pytester) -> None:
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
