"""Any running server, one command: the shipped gates against a tiny-cpu server started by
hand (not by the plugin), from an empty directory, with and without a recipe.

The server is the session's shared one (``shared_tiny_server``, tests/conftest.py: the tiny-cpu
recipe's argv, started as an operator starts it): these tests only send it requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.shared_server import SharedTinyServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.real_vllm]
GATES = ["suites/test_smoke.py", "suites/test_engine.py", "suites/test_openai_sdk.py"]


def run(cwd: Path, *args: str, gates: list[str] = GATES) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLMQUAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # An empty ini in the empty directory: the checkout's own ini (vllmqual_recipe = tiny-cpu) must not apply.
    (cwd / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", str(cwd),
                             "-p", "no:cacheprovider", "-rA",
                             *(str(ROOT / g) for g in gates), "--junitxml=junit.xml", *args],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    reports = sorted((cwd / "reports").glob("*.json"))
    assert reports, result.stdout[-4000:] + result.stderr[-2000:]
    return result, json.loads(reports[-1].read_text())


def test_endpoint_with_recipe_takes_the_kv_pool_from_metrics(shared_tiny_server: SharedTinyServer,
                                                             tmp_path: Path) -> None:
    result, report = run(tmp_path, "--recipe=tiny-cpu", "--vllmqual-endpoint", shared_tiny_server.base_url)
    assert result.returncode == 0, result.stdout[-4000:]
    assert report["run"]["mode"] == "direct-only" and report["recipe"]["origin"] == "file"
    engine = report["engine"]
    assert engine["kv_cache_tokens"] == 1_048_576  # VLLM_CPU_KVCACHE_SPACE=1 GiB per rank, the recipe's float32
    assert engine["sources"]["kv_cache_tokens"] == "metrics"
    assert engine["sources"]["ranks"] == "not observable from the endpoint"
    gates = {g["gate"]: g for g in report["gates"]}
    assert gates["kv_pool"]["outcome"] == "passed" and gates["kv_pool"]["measurements"]["kv_cache_tokens_source"] \
        == "metrics"
    assert gates["engine_ranks"]["outcome"] == "skipped" and "not observable" in gates["engine_ranks"]["reason"]
    assert gates["identity"]["outcome"] == "passed" and gates["openai_sdk"]["outcome"] == "passed"
    assert report["gates"][0]["gate"] == "smoke"


def test_endpoint_without_recipe_discovers_one(shared_tiny_server: SharedTinyServer, tmp_path: Path) -> None:
    result, report = run(tmp_path, "--vllmqual-endpoint", shared_tiny_server.base_url,
                         "-k", "smoke or identity or kv_pool")
    assert result.returncode == 0, result.stdout[-4000:]
    assert report["recipe"]["origin"] == "discovered"
    content = report["recipe"]["content"]
    assert content["discovered"] is True and content["pinned"] is False
    assert content["serve"]["max_model_len"] == 32768 and content["identity"]["runtime_version"] == "0.32.0"
    gates = {g["gate"]: g for g in report["gates"]}
    assert "nothing was pinned" in gates["identity"]["summary"]
    assert gates["kv_pool"]["thresholds"]["min_kv_tokens"] == "nothing pinned (discovered recipe)"
    assert "DISCOVERED from the endpoint, not pinned" in result.stdout


def test_endpoint_without_recipe_sends_no_ladder_it_was_not_asked_for(shared_tiny_server: SharedTinyServer,
                                                                       tmp_path: Path) -> None:
    """A discovered recipe sets no rungs: the ladder sends nothing to someone's server and says not measured."""
    result, report = run(tmp_path, "--vllmqual-endpoint", shared_tiny_server.base_url, "-k", "ladder",
                         gates=["suites/test_capacity.py"])
    assert result.returncode == 0, result.stdout[-4000:]
    ladder = next(g for g in report["gates"] if g["gate"] == "ladder")
    assert ladder["outcome"] == "skipped" and ladder["reason"].startswith("not measured: recipe discovered-"), ladder
    assert ladder["proves"] is None and report["ladder"] == []
