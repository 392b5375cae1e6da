"""Identity against a server started by hand, as the README's "Qualify a running server" says:
``--model fixtures/model/build/tiny-chat`` from the checkout (the session's shared server,
``shared_tiny_server``, is started that way), the gates run from an empty directory. The server
reports the relative path; the run finds the server's working directory through its listening
socket (loopback) and sees the recipe's own checkpoint, so identity passes and the gates after
it run (no fail fast on a false mismatch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.fault_harness import ROOT
from support.shared_server import SharedTinyServer

pytestmark = [pytest.mark.real_vllm]
GATES = ["suites/test_smoke.py", "suites/test_engine.py"]


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
        shared_tiny_server: SharedTinyServer, tmp_path: Path) -> None:
    assert shared_tiny_server.served_root == "fixtures/model/build/tiny-chat"  # started by hand, relative
    result, report = run_gates(tmp_path, "--recipe=tiny-cpu", "--vllmqual-endpoint", shared_tiny_server.base_url)
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
