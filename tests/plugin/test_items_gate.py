"""The shipped item bank gate in a qualification session, against the project's fault server (which
answers every chat "Ok."): the gate is in the report, its arithmetic family is not measured (no
number in any answer), an operator's own item judged by exact text is measured, and the arm's sidecar
beside the report carries the ``items`` block a comparison reads (the bank and every outcome)."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
from support import ROOT, python_path
from support.fault_harness import derive_recipe, kill_tagged
from support.fault_launcher import FAULT_SERVER_KIND

CONFTEST = '''
from support.fault_launcher import FaultServerLauncher


def pytest_vllmqual_launchers(config):
    return [FaultServerLauncher]
'''


def test_the_item_bank_gate_runs_and_its_answers_go_into_the_sidecar(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", python_path(os.environ.get("PYTHONPATH")))
    pytester.makeconftest(CONFTEST)
    shutil.copy(ROOT / "suites" / "test_items.py", pytester.path / "test_items.py")
    own = pytester.path / "own.jsonl"
    own.write_text(json.dumps({"prompt": "Say Ok.", "answer": "ok", "judge": "exact_text", "id": "ok"}) + "\n")
    recipe = derive_recipe(pytester.path / "recipes", "tiny-items", {
        "launcher": {"kind": FAULT_SERVER_KIND, "-command": None},
        "startup": {"deadline_s": 20, "poll_interval_s": 0.2, "ready_completion_timeout_s": 3},
        "requests": {"timeout_s": 5, "retries": 0},
        "gates": {"items": {"families": ["arithmetic"], "count": 3, "operator_file": str(own)}}})
    reports = pytester.path / "reports"
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--recipe", str(recipe.path),
                                               f"--vllmqual-reports-dir={reports}")
    finally:
        kill_tagged(recipe.tag)
    assert result.ret == 0, result.stdout.str()
    (path,) = reports.glob("tiny-items-*.json")
    report = json.loads(path.read_text())
    gate = next(g for g in report["gates"] if g["gate"] == "items")
    assert gate["outcome"] == "passed", gate
    families = {row["family"]: row for row in gate["measurements"]["families"]}
    assert families["arithmetic"]["reason"].startswith("not measured: 100.0% of its answers could not be parsed")
    assert families["operator"]["measured"] and families["operator"]["accuracy_pct"] == 100.0
    reference = report["equivalence_probe"]
    assert reference["probe_sha256"] is None and reference["items"] == 4
    body = json.loads(gzip.decompress((path.parent / reference["file"]).read_bytes()))
    assert body["items"]["bank"]["sha256"] == reference["items_bank_sha256"] == gate["measurements"]["bank_sha256"]
    assert [o["item_id"] for o in body["items"]["outcomes"]] == [
        "arithmetic-000", "arithmetic-001", "arithmetic-002", "operator-ok"]
    assert body["items"]["answers"][-1]["text"] == "Ok."
