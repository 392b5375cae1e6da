"""The documented report hooks (README "Report hooks"): a conftest adds a field under
``extensions`` and redacts a recipe value; the written report carries both and still
validates. The gate here needs no server (it only records a measurement), so the hook path
is tested without booting vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
def pytest_vllmqual_update_report(config, report):
    report["extensions"]["ticket"] = "QUAL-123"
    report["recipe"]["content"]["description"] = "<redacted by conftest>"
'''

GATE = '''
def test_measured(gate):
    gate.measure(answer=42)
    gate.summary("pass")
'''


def test_update_hook_adds_and_redacts(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gate=GATE)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           f"--vllmqual-reports-dir={reports}")
    assert result.ret == 0, result.stdout.str()
    (path,) = reports.glob("tiny-cpu-*.json")
    report = json.loads(path.read_text())
    assert report["extensions"]["ticket"] == "QUAL-123"
    assert report["recipe"]["content"]["description"] == "<redacted by conftest>"
    gate = next(g for g in report["gates"] if g["gate"] == "measured")
    assert gate["measurements"]["answer"] == 42 and gate["outcome"] == "passed"


def test_update_hook_cannot_write_an_invalid_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
def pytest_vllmqual_update_report(config, report):
    report["not_a_section"] = 1
''')
    pytester.makepyfile(test_gate=GATE)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           f"--vllmqual-reports-dir={reports}")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*REPORT NOT WRITTEN*not_a_section*"])
    assert not list(reports.glob("tiny-cpu-*.json")), "an invalid report must never be written"


def test_junit_carries_gate_measurements(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=GATE)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           f"--vllmqual-reports-dir={pytester.path / 'reports'}",
                                           f"--junitxml={junit}")
    assert result.ret == 0
    text = junit.read_text()
    assert '<property name="vllmqual.measured.answer" value="42"' in text
    assert '<property name="vllmqual.measured.summary" value="pass"' in text
