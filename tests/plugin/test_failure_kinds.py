"""A declaration excuses the model, never the server, in a whole session: a declared tools gate
whose server answers HTTP 500 or times out ends failed in the report, with whose failure it was;
one whose model answers in prose ends skipped. The server is replayed (httpx.MockTransport), so
the gates need no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GATES = '''
import dataclasses

import httpx
import pytest

from pytest_vllmqual import QualClient, ServerHandle, tools_gate
from pytest_vllmqual.gates.checks import ToolCase

WEATHER = ToolCase(name="get_weather", description="Weather.", prompt="Weather in Lima?",
                   parameters={"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
                   expected={"city": "Lima"})


def prose(request):
    return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Sunny."}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})


def failing(request):
    return httpx.Response(500, json={"error": {"message": "engine overloaded", "type": "x", "code": 500}})


def timing_out(request):
    raise httpx.ReadTimeout("timed out", request=request)


def run(recipe, gate, handler):
    client = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                        timeout_s=5)
    client._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    client.sink = gate
    declared = dataclasses.replace(recipe, gates={**recipe.gates, "tools": {"not_applicable": "no tools"}})
    verdict = tools_gate(client, declared, gate, [WEATHER])
    if verdict.skip_reason:
        pytest.skip(verdict.skip_reason)
    assert verdict.passed, verdict.failure


@pytest.mark.gate("tools")
def test_prose(recipe, gate):
    run(recipe, gate, prose)


@pytest.mark.gate("tools")
def test_http_500(recipe, gate):
    run(recipe, gate, failing)


@pytest.mark.gate("tools")
def test_timeout(recipe, gate):
    run(recipe, gate, timing_out)
'''


def test_a_declared_gate_fails_on_the_servers_failure_and_skips_on_the_models(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gates=GATES)
    reports = pytester.path / "reports"
    pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}", "--recipe=tiny-cpu",
                                  f"--vllmqual-reports-dir={reports}", "--vllmqual-no-fail-fast",
                                  "-p", "no:cacheprovider")
    (path,) = reports.glob("tiny-cpu-*.json")
    gates = {str(g["nodeid"]).rsplit("::", 1)[-1]: g for g in json.loads(path.read_text())["gates"]}
    said = {name: (g["outcome"], g.get("failure_kind")) for name, g in gates.items()}
    assert said == {"test_prose": ("skipped", "model_behaviour"), "test_http_500": ("failed", "server_error"),
                    "test_timeout": ("failed", "transport")}
    assert "excuses only the model's answers" in str(gates["test_http_500"]["reason"])
    assert "engine overloaded" not in path.read_text()
