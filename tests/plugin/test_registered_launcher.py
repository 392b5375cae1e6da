"""A launcher registered from a conftest, with no edit to the package: the conftest returns the
test-only ``fault-server`` launcher (``support.fault_launcher``) from the
``pytest_vllmqual_launchers`` hook, a recipe names that kind, and the shipped smoke gate runs
against the server it starts. That server is the project's fault server (a small HTTP server,
ready in under a second), not vLLM, so this stays a plugin test."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, python_path
from support.fault_harness import derive_recipe, kill_tagged
from support.fault_launcher import FAULT_SERVER_KIND

CONFTEST = '''
from support.fault_launcher import FaultServerLauncher


def pytest_vllmqual_launchers(config):
    return [FaultServerLauncher]
'''

QUICK: dict[str, Any] = {
    "startup": {"deadline_s": 20, "poll_interval_s": 0.2, "ready_completion_timeout_s": 3},
    "requests": {"timeout_s": 5, "retries": 0},
    "gates": {"smoke": {"expect_substring": "Ok"}},  # the fault server's one answer ("Ok.")
}


def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kind: str) -> tuple[pytest.RunResult, Path]:
    """One qualification session of the smoke gate against a recipe of launcher ``kind``."""
    monkeypatch.setenv("PYTHONPATH", python_path(os.environ.get("PYTHONPATH")))
    pytester.makeconftest(CONFTEST)
    shutil.copy(ROOT / "suites" / "test_smoke.py", pytester.path / "test_smoke.py")
    recipe = derive_recipe(pytester.path / "recipes", f"tiny-{kind}",
                           {"launcher": {"kind": kind, "-command": None}, **QUICK})
    reports = pytester.path / "reports"
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--recipe", str(recipe.path),
                                               f"--vllmqual-reports-dir={reports}")
    finally:
        kill_tagged(recipe.tag)
    return result, reports


def test_a_conftest_registers_a_launcher_and_the_smoke_gate_runs_against_its_server(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result, reports = session(pytester, monkeypatch, FAULT_SERVER_KIND)
    assert result.ret == 0, result.stdout.str()
    (path,) = reports.glob(f"tiny-{FAULT_SERVER_KIND}-*.json")
    report = json.loads(path.read_text())
    smoke = next(g for g in report["gates"] if g["gate"] == "smoke")
    assert smoke["outcome"] == "passed"
    life = report["lifecycle"]
    assert life["launcher"] == FAULT_SERVER_KIND and life["startup_status"] == "ready"
    assert life["teardown"]["launcher"] == FAULT_SERVER_KIND and life["teardown"]["clean"] is True


def test_a_misspelt_kind_is_refused_before_anything_starts_naming_the_registered_ones(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result, reports = session(pytester, monkeypatch, "fault-servr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*key 'launcher.kind' is 'fault-servr'*"
                                 "(registered: subprocess, docker, external, fault-server)*"])
    assert not list(reports.glob("*.json"))
