"""A real model nobody here trained: `pytest suites --recipe=smollm2-cpu --vllmqual-no-fail-fast`,
run once (one session: about 5 minutes on 2 busy cores), every gate's outcome asserted against
the committed expectation (tests/data/smollm2-cpu-expected.yaml), with what makes each one true:
the declared gates ran and measured failing, the arithmetic was judged by its final number, the
long-context check sized itself to the served context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.report.public import validate_report

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "fixtures" / "recipes" / "smollm2-cpu.yaml"
EXPECTED = ROOT / "tests" / "data" / "smollm2-cpu-expected.yaml"

pytestmark = [pytest.mark.real_vllm]


@pytest.fixture(scope="module")
def smollm2_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    recipe = load_recipe(RECIPE)
    if not recipe.prepare and not Path(recipe.model_location()).is_dir():
        pytest.skip(f"the converted SmolLM2 folder {recipe.model_location()} is not on this machine and the recipe "
                    "has no prepare step to make it")
    reports = tmp_path_factory.mktemp("smollm2")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--recipe=smollm2-cpu", "--vllmqual-no-fail-fast",
         f"--vllmqual-reports-dir={reports}", "-p", "no:cacheprovider", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    paths = sorted(reports.glob("smollm2-cpu-*.json"))
    assert paths, f"no report written; pytest said:\n{(proc.stdout + proc.stderr)[-5000:]}"
    report: dict[str, Any] = json.loads(paths[-1].read_text())
    return report


def test_every_gate_has_its_expected_outcome(smollm2_report: dict[str, Any]) -> None:
    validate_report(smollm2_report)
    expected = yaml.safe_load(EXPECTED.read_text())
    seen: dict[str, list[dict[str, Any]]] = {}
    for gate in smollm2_report["gates"]:
        seen.setdefault(gate["gate"], []).append(gate)
    assert set(seen) == set(expected["gates"]), sorted(set(seen) ^ set(expected["gates"]))
    wrong = {name: [(g["outcome"], g.get("reason")) for g in records]
             for name, records in seen.items()
             if any(g["outcome"] != expected["gates"][name]["outcome"] for g in records)}
    assert not wrong, wrong
    for name, spec in expected["gates"].items():
        if "measured" in spec:
            measured = [g["measurements"].get("measured_outcome") for g in seen[name]]
            assert measured == [spec["measured"]] * len(seen[name]), (name, measured)
            assert all("(declared; this run measured:" in g["reason"] for g in seen[name]), name
    assert smollm2_report["decision"]["verdict"] == expected["verdict"]


def test_what_makes_the_outcomes_true(smollm2_report: dict[str, Any]) -> None:
    gates = {g["gate"]: g for g in smollm2_report["gates"]}
    long_context = gates["quality_long_context"]["measurements"]
    assert long_context["target_tokens"] == 8160 and long_context["prompt_tokens"] == [8160]
    arithmetic = [g for g in smollm2_report["gates"] if g["gate"] == "quality_intelligence"]
    assert all(g["summary"] == "3/3" and "number_only" in g["measurements"] for g in arithmetic)
    assert gates["smoke"]["thresholds"]["expect_substring"] == "cloud"
    assert gates["identity"]["measurements"]["identity_status"] == "verified"
