"""Identity against a server started by hand, as the README's "Qualify a running server" says:
``--model fixtures/model/build/tiny-chat`` from the checkout, the gates run from an empty
directory. The server reports the relative path; the run finds the server's working directory
through its listening socket (loopback) and sees the recipe's own checkpoint, so identity
passes and the gates after it run (no fail fast on a false mismatch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_harness import ROOT, kill_tagged, tiny_model_dir

from pytest_vllmqual.launch.base import free_port
from pytest_vllmqual.recipe.loader import load_recipe

pytestmark = [pytest.mark.real_vllm]
GATES = ["suites/test_smoke.py", "suites/test_engine.py"]


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vllm serve started in the checkout with the model as a relative path; its URL once ready."""
    directory = tmp_path_factory.mktemp("by-hand")
    model = os.path.relpath(tiny_model_dir(), ROOT)
    recipe = load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")
    port = free_port("127.0.0.1")
    tag = uuid.uuid4().hex
    env = {**os.environ, **recipe.server_env(), "FAULT_TAG": tag}
    env.pop("VLLM_API_KEY", None)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            *recipe.serve_flags(host="127.0.0.1", port=port)]
    log_path = directory / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
            else:
                raise AssertionError("the hand-started server did not come up in 600 s")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            kill_tagged(tag)


def run_gates(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLMQUAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    (cwd / "pytest.ini").write_text("[pytest]\n")  # the checkout's own ini must not apply
    result = subprocess.run([sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", str(cwd),
                             "-p", "no:cacheprovider", "-rA", *(str(ROOT / g) for g in GATES), *args],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    reports = sorted((cwd / "reports").glob("*.json"))
    assert reports, result.stdout[-4000:] + result.stderr[-2000:]
    return result, json.loads(reports[-1].read_text())


def test_a_relative_model_path_of_a_hand_started_server_is_the_recipe_s_checkpoint(
        hand_started: str, tmp_path: Path) -> None:
    result, report = run_gates(tmp_path, "--recipe=tiny-cpu", "--vllmqual-endpoint", hand_started)
    assert result.returncode == 0, result.stdout[-4000:]
    identity = report["identity"]
    checkpoint = next(c for c in identity["checks"] if c["field"] == "checkpoint")
    assert checkpoint["status"] == "matched", checkpoint
    assert checkpoint["observed"] == "fixtures/model/build/tiny-chat"
    assert "the same directory" in checkpoint["note"]
    assert identity["status"] != "provenance_mismatch"
    outcomes = {g["gate"]: g["outcome"] for g in report["gates"]}
    assert outcomes["identity"] == "passed" and outcomes["kv_pool"] == "passed", outcomes
    assert not [g for g in report["gates"] if g.get("status") == "not_run"], "fail fast stopped the run"
    assert str(ROOT) not in json.dumps(report), "the checkout's location reached the report"
