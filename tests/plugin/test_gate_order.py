"""Cheapest gates first (smoke, identity, functional, reasoning, quality, engine, capacity) and
fail fast: a failed smoke or identity gate ends the arm's remaining gates as "not run: …",
in the report and in junit, with a non-zero exit. The gates here record without a server."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Written in the reverse of the run order, as a file-order run would meet them.
GATES = '''
import os

def test_ladder(gate):
    gate.summary("ran")

def test_kv_pool(gate):
    gate.summary("ran")

def test_quality_tools(gate):
    gate.summary("ran")

def test_reasoning_fingerprints(gate):
    gate.summary("ran")

def test_json(gate):
    gate.summary("ran")

def test_identity(gate):
    assert os.environ.get("BREAK") != "identity", "provenance_mismatch"

def test_smoke(gate):
    assert os.environ.get("BREAK") != "smoke", "smoke answered nonsense"

def test_not_a_gate():
    pass
'''
RUN_ORDER = ["test_smoke", "test_identity", "test_json", "test_not_a_gate", "test_reasoning_fingerprints",
             "test_quality_tools", "test_kv_pool", "test_ladder"]


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[ET.Element], dict[str, dict]]:
    pytester.makepyfile(test_gates=GATES)
    reports = pytester.path / "reports"
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", f"--vllmqual-reports-dir={reports}",
                                           f"--junitxml={junit}", "-p", "no:cacheprovider", *args)
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    (path,) = reports.glob("tiny-cpu-*.json")
    gates = {g["gate"]: g for g in json.loads(path.read_text())["gates"]}
    return result, cases, gates


def test_cheapest_first_in_junit(pytester: pytest.Pytester) -> None:
    result, cases, _ = run(pytester)
    assert result.ret == 0, result.stdout.str()
    assert [c.get("name") for c in cases] == RUN_ORDER


def test_failed_smoke_ends_the_rest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAK", "smoke")
    result, cases, gates = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert cases[0].get("name") == "test_smoke" and cases[0].find("failure") is not None
    for case in cases[1:]:
        if case.get("name") == "test_not_a_gate":
            continue
        skipped = case.find("skipped")
        assert skipped is not None and "not run: smoke failed" in (skipped.get("message") or ""), case.get("name")
    for name in ("identity", "json", "ladder", "kv_pool"):
        assert gates[name]["outcome"] == "skipped" and gates[name]["status"] == "not_run"
        assert gates[name]["reason"].startswith("not run: smoke failed")


def test_failed_identity_ends_the_rest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAK", "identity")
    result, _, gates = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert gates["smoke"]["outcome"] == "passed" and gates["identity"]["outcome"] == "failed"
    assert gates["ladder"]["reason"].startswith("not run: identity mismatch")


def test_no_fail_fast_runs_everything(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAK", "smoke")
    result, _, gates = run(pytester, "--vllmqual-no-fail-fast")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert gates["smoke"]["outcome"] == "failed"
    assert all(g["outcome"] == "passed" for name, g in gates.items() if name != "smoke")


# In file order the probe comes first, as a user's suite or the shipped suites collect it.
RISKY_GATES = '''
import pytest

@pytest.mark.gate("equivalence")
def test_equivalence_probe(gate):
    gate.summary("ran")

@pytest.mark.gate("items")
def test_item_bank(gate):
    gate.summary("ran")

def test_load(gate):
    gate.summary("ran")

def test_ladder(gate):
    gate.summary("ran")

def test_kv_pool(gate):
    gate.summary("ran")

def test_json(gate):
    gate.summary("ran")

def test_cold_start(gate):
    gate.summary("ran")

def test_smoke(gate):
    gate.summary("ran")
'''


def test_gates_that_can_kill_the_server_run_after_the_cheap_ones(pytester: pytest.Pytester) -> None:
    """The equivalence probe, the ladder and load run last (in that order), so a server that dies
    under one of them keeps every cheap gate's evidence; the item bank runs just before them (its
    needle prompts are the longest before the probe's, and its answers survive a server the probe kills)."""
    pytester.makepyfile(test_risky=RISKY_GATES)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", f"--vllmqual-reports-dir={pytester.path / 'r'}",
                                           f"--junitxml={junit}", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert names == ["test_smoke", "test_json", "test_kv_pool", "test_cold_start", "test_item_bank",
                     "test_equivalence_probe", "test_ladder", "test_load"]
