"""The gate registry decides what a report says about a gate, not the test function's name.

Two sessions run the same gate under two function names (``test_tool_continuation`` and
``test_renamed_for_no_reason``), both carrying ``@pytest.mark.gate("tool_continuation")``. Their
reports, HTML pages and junit files say the same thing about the gate: its name, family,
title, what it proves, and the 6/6 preflight count. The gates need no server (they only
record), so this runs without vLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

GATES = '''
import pytest

@pytest.mark.gate("smoke")
def test_smoke(gate):
    gate.summary("pass")

@pytest.mark.gate("tool_continuation")
def {name}(gate):
    """A docstring the registry's title replaces."""
    gate.summary("pass")

@pytest.mark.gate("concurrency")
def test_concurrency(gate):
    gate.measure(requests=4)
    gate.summary("4/4 concurrent requests")
'''


def run_session(pytester: pytest.Pytester, function_name: str, *args: str) -> tuple[dict[str, Any], str, str]:
    directory = pytester.path / function_name
    directory.mkdir()
    (directory / "test_gates.py").write_text(GATES.replace("{name}", function_name))
    reports = directory / "reports"
    junit = directory / "junit.xml"
    result = pytester.runpytest_subprocess(str(directory / "test_gates.py"),
                                           f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           f"--vllmqual-reports-dir={reports}", f"--junitxml={junit}", *args)
    assert result.ret == 0, result.stdout.str()
    (path,) = reports.glob("tiny-cpu-*.json")
    return json.loads(path.read_text()), path.with_suffix(".html").read_text(), junit.read_text()


def gate_view(report: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("gate", "family", "title", "proves", "outcome", "summary", "measurements")
    return [{k: g[k] for k in keep} for g in report["gates"]]


def test_renaming_a_test_function_changes_nothing_in_a_report(pytester: pytest.Pytester) -> None:
    original, original_html, original_junit = run_session(pytester, "test_tool_continuation")
    renamed, renamed_html, renamed_junit = run_session(pytester, "test_renamed_for_no_reason")
    assert gate_view(original) == gate_view(renamed)
    continuation = next(g for g in renamed["gates"] if g["gate"] == "tool_continuation")
    assert continuation["family"] == "functional" and continuation["title"] == "Tool-result continuation"
    assert continuation["proves"].startswith("after a tool call and its result, the model's next turn ended with "
                                             "finish_reason stop")
    assert original["decision"]["gates"] == renamed["decision"]["gates"]
    assert original["decision"]["proves"] == renamed["decision"]["proves"]
    assert original["decision"]["does_not_prove"] == renamed["decision"]["does_not_prove"]
    assert [g["outcome"] for g in renamed["preflight"]["gates"]] == \
        [g["outcome"] for g in original["preflight"]["gates"]]

    def gate_rows(page: str) -> list[str]:
        """The gate's rows, its seconds (the first number: a measurement, which two runs need not share) left out."""
        rows = re.findall(r"<tr[^>]*><td>tool_continuation</td>.*?</tr>", page)
        return [re.sub(r'<td class="num">\d+\.\d\d</td>', '<td class="num">(seconds)</td>', row, count=1) for row in rows]

    assert gate_rows(original_html) == gate_rows(renamed_html) and gate_rows(renamed_html)
    for junit in (original_junit, renamed_junit):
        assert '<property name="vllmqual.tool_continuation.family" value="functional"' in junit
        assert '<property name="vllmqual.tool_continuation.title" value="Tool-result continuation"' in junit


def test_deselected_gates_are_named_and_cap_the_verdict(pytester: pytest.Pytester) -> None:
    report, _html, _junit = run_session(pytester, "test_tool_continuation", "-k", "not concurrency")
    assert report["run"]["deselected_gates"] == [{"gate": "concurrency", "reason": "deselected by -k 'not concurrency'"}]
    row = next(r for r in report["decision"]["gates"] if r["gate"] == "concurrency")
    assert row == {"gate": "concurrency", "family": "capacity", "title": "Concurrency", "outcome": "absent",
                   "reason": "deselected (deselected by -k 'not concurrency')"}
    assert report["decision"]["verdict"] != "candidate"
    assert any(i.startswith("Concurrency (gate concurrency, capacity): not run: deselected")
               for i in report["decision"]["does_not_prove"])
