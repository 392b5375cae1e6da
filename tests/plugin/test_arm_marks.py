"""``--vllmqual-arm-marks ROLE=EXPR``: each arm of an A/B runs its own subset of the gates.

The gates below only record (no server), so a bracketed A/B runs here without vLLM: the control
runs every gate, the candidate the smoke (named by its gate name) and the equivalence-marked gate,
the replay only the latter. Each arm's report names the gates it did not run as deselected by the
option, and the decision says so and keeps the arm below promotable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

GATES = '''
import pytest

@pytest.mark.gate("smoke")
@pytest.mark.functional
def test_smoke(gate):
    gate.summary("pass")

@pytest.mark.gate("concurrency")
@pytest.mark.capacity
def test_concurrency(gate):
    gate.summary("4/4 concurrent requests")

@pytest.mark.gate("equivalence")
@pytest.mark.equivalence
def test_probe(gate):
    gate.summary("answered")
'''


def run_ab(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    (pytester.path / "test_gates.py").write_text(GATES)
    return pytester.runpytest_subprocess(
        "test_gates.py", f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
        f"--vllmqual-reports-dir={pytester.path / 'reports'}", "--ab=tiny-cpu,tiny-cpu-4096", *args)


def reports_by_arm(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    found = {}
    for path in (pytester.path / "reports").glob("*Z.json"):
        if not path.name.startswith("comparison-"):
            found[path.name.split("-tiny-cpu")[0]] = json.loads(path.read_text())
    return found


def test_each_arm_runs_its_own_gates_and_names_the_rest_deselected(pytester: pytest.Pytester) -> None:
    result = run_ab(pytester, "--bracket", "--vllmqual-arm-marks", "candidate=smoke or equivalence",
                    "--vllmqual-arm-marks", "replay=equivalence", "-v")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*6 passed, 3 deselected*"])
    reports = reports_by_arm(pytester)
    assert sorted(reports) == ["A", "A2", "B"]
    ran = {arm: sorted(g["gate"] for g in report["gates"]) for arm, report in reports.items()}
    assert ran == {"A": ["concurrency", "equivalence", "smoke"], "B": ["equivalence", "smoke"], "A2": ["equivalence"]}
    assert reports["A"]["run"]["deselected_gates"] == []
    assert reports["B"]["run"]["deselected_gates"] == [
        {"gate": "concurrency", "reason": "deselected by --vllmqual-arm-marks candidate='smoke or equivalence'"}]
    assert reports["A2"]["run"]["deselected_gates"] == [
        {"gate": "smoke", "reason": "deselected by --vllmqual-arm-marks replay='equivalence'"},
        {"gate": "concurrency", "reason": "deselected by --vllmqual-arm-marks replay='equivalence'"}]
    for arm in ("B", "A2"):
        decision = reports[arm]["decision"]
        assert decision["verdict"] not in ("promotable", "priority-challenger")
        row = next(r for r in decision["gates"] if r["gate"] == "concurrency")
        assert row["outcome"] == "absent" and "--vllmqual-arm-marks" in row["reason"]
        assert "Concurrency (gate concurrency, capacity): not run: deselected (deselected by --vllmqual-arm-marks " \
            f"{'candidate' if arm == 'B' else 'replay'}=" in " ".join(decision["does_not_prove"])
    assert len(list((pytester.path / "reports").glob("comparison-*.json"))) == 1


def test_arm_marks_add_to_m_and_each_deselection_keeps_its_own_reason(pytester: pytest.Pytester) -> None:
    result = run_ab(pytester, "-m", "not capacity", "--vllmqual-arm-marks", "candidate=equivalence")
    assert result.ret == 0, result.stdout.str()
    reports = reports_by_arm(pytester)
    assert reports["A"]["run"]["deselected_gates"] == [{"gate": "concurrency", "reason": "deselected by -m 'not capacity'"}]
    assert sorted(map(str, reports["B"]["run"]["deselected_gates"])) == sorted(map(str, [
        {"gate": "concurrency", "reason": "deselected by -m 'not capacity'"},
        {"gate": "smoke", "reason": "deselected by --vllmqual-arm-marks candidate='equivalence'"}]))


@pytest.mark.parametrize(("args", "message"), [
    (["--vllmqual-arm-marks", "candidate=smoke"], "*--vllmqual-arm-marks picks the gates of an A/B arm and needs "
                                                   "--ab CONTROL,CANDIDATE. Fix: *"),
    (["--ab=tiny-cpu,tiny-cpu-4096", "--vllmqual-arm-marks", "cand=smoke"],
     "*--vllmqual-arm-marks 'cand=smoke': 'cand' is not a role of an A/B arm. Fix: ROLE is one of control, "
     "candidate, replay*"),
    (["--ab=tiny-cpu,tiny-cpu-4096", "--vllmqual-arm-marks", "replay=equivalence"],
     "*--vllmqual-arm-marks 'replay=equivalence': this A/B has no replay arm. Fix: add --bracket*"),
    (["--ab=tiny-cpu,tiny-cpu-4096", "--vllmqual-arm-marks", "candidate"],
     "*--vllmqual-arm-marks takes ROLE=EXPR; got 'candidate'. Fix: e.g. *"),
    (["--ab=tiny-cpu,tiny-cpu-4096", "--vllmqual-arm-marks", "candidate=smoke", "--vllmqual-arm-marks",
      "candidate=equivalence"], "*names the candidate arm twice ('smoke' and 'equivalence'). Fix: *"
                                "candidate='(smoke) or (equivalence)'*"),
    (["--ab=tiny-cpu,tiny-cpu-4096", "--vllmqual-arm-marks", "candidate=smoke or"],
     "*--vllmqual-arm-marks: 'smoke or' is not a marker expression: * Fix: write it as for -m*"),
])
def test_a_bad_value_is_a_usage_error_that_names_it_and_the_fix(pytester: pytest.Pytester, args: list[str],
                                                                 message: str) -> None:
    (pytester.path / "test_gates.py").write_text(GATES)
    result = pytester.runpytest_subprocess("test_gates.py", f"--vllmqual-recipes-dir={ROOT / 'fixtures' / 'recipes'}",
                                           f"--vllmqual-reports-dir={pytester.path / 'reports'}", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([message])
    assert not (pytester.path / "reports").exists() or not list((pytester.path / "reports").glob("*.json"))
