"""The read model: a report read once into the typed record, with each fact the judges ask written once."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from support import ROOT, UNIT_DATA

from pytest_vllmqual.ab.compare import compare_reports
from pytest_vllmqual.ab.decision import Targets
from pytest_vllmqual.campaign.requirements import evaluate_requirement
from pytest_vllmqual.report.decision import decide
from pytest_vllmqual.report.read_model import KvMinimum, RunView, public_record

REFERENCE = UNIT_DATA / "reference_reports"
JUDGES = ("report/decision.py", "ab/decision.py", "campaign/requirements.py", "campaign/qualify.py",
          "campaign/decision.py", "ab/compare.py")


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REFERENCE / name).read_text(encoding="utf-8"))
    return data


def _with_load(report: dict[str, Any], *, max_at_slo: int | None, levels: list[int]) -> dict[str, Any]:
    out = copy.deepcopy(report)
    out["gates"].append({"nodeid": "suites/test_load.py::test_load", "gate": "load", "outcome": "passed",
                         "measurements": {"max_at_slo": max_at_slo, "promoted_levels": levels}})
    return out


def test_the_facts_are_read_from_the_report_once() -> None:
    report = _load("control-8192.json")
    view = RunView.of(report)
    assert view.record == public_record(report)
    assert view.ready and view.startup_failure is None
    sizes = [r["prompt_tokens"] for r in report["ladder"] if r.get("ok") and not r.get("expected_rejection")]
    assert view.largest_prompt == max(sizes)
    assert view.kv_pool == report["engine"]["kv_cache_tokens"]
    assert view.max_model_len == report["recipe"]["content"]["serve"]["max_model_len"]
    assert view.verdict.value == report["decision"]["verdict"]
    assert view.sustained_load is None and view.passed_load is None


def test_a_failed_start_is_not_ready_and_says_why() -> None:
    report = _load("control-8192.json")
    report["lifecycle"]["startup_status"] = "kv_insufficient"
    view = RunView.of(report)
    assert not view.ready and view.startup_failure == "startup status kv_insufficient"
    assert not view.started_at(1)
    assert evaluate_requirement(report, "startup").detail == view.startup_failure


def test_the_kv_minimum_is_the_gate_threshold_then_the_recipe_then_max_model_len() -> None:
    report = _load("control-8192.json")
    report["recipe"]["content"].setdefault("gates", {}).pop("engine", None)
    report["gates"] = [g for g in report["gates"] if g.get("gate") != "kv_pool"]
    assert RunView.of(report).kv_minimum == KvMinimum(report["recipe"]["content"]["serve"]["max_model_len"],
                                                      "max_model_len")
    report["gates"].append({"nodeid": "k", "gate": "kv_pool", "outcome": "passed",
                            "thresholds": {"min_kv_tokens": 1_000}})
    assert RunView.of(report).kv_minimum == KvMinimum(1_000, "recipe minimum")


def test_sustained_load_is_one_rule_for_the_run_and_the_comparison() -> None:
    control, candidate = _load("control-8192.json"), _load("candidate-4096.json")
    loaded = _with_load(candidate, max_at_slo=None, levels=[2, 6, 4])
    assert RunView.of(loaded).sustained_load == 6
    run_said = decide(public_record(loaded)).does_not_prove
    ab_said = compare_reports(control, loaded)["decision"]["does_not_prove"]
    sentence = "sustained load above 6 requests in flight within the SLOs"
    assert sentence in run_said and sentence in ab_said


def test_no_judge_derives_a_fact_of_the_read_model_again() -> None:
    """The words each rule reads (a load gate's level, the startup status, the KV minimum, the
    concurrency count, the identity's pinning, a declaration, the capacity floor) appear in the read model only."""
    rule_words = re.compile(r"max_at_slo|promoted_levels|startup_status|startup_error|min_kv_tokens\(|"
                            r"\"requests\"|IdentityResult|declared_not_applicable|\"min_largest_prompt\"|report\.query")
    package = ROOT / "pytest_vllmqual"
    found = {name: rule_words.findall((package / name).read_text(encoding="utf-8").split('"""', 2)[-1])
             for name in JUDGES}
    assert {name: words for name, words in found.items() if words} == {}
    assert rule_words.search((package / "report" / "read_model.py").read_text(encoding="utf-8"))


def test_the_capacity_floor_is_one_rule_for_the_run_the_campaign_and_the_comparison() -> None:
    report = _load("control-8192.json")
    view = RunView.of(report)
    assert view.largest_prompt is not None
    floor = view.largest_prompt + 1
    report["recipe"]["content"]["gates"]["capacity"]["min_largest_prompt"] = floor
    assert RunView.of(report).prompt_floor == floor
    assert Targets.from_reports([report]).prompt_tokens == floor
    assert f"≤ {floor:,}" in evaluate_requirement(report, "ladder").detail
    assert any(item.startswith("a request above") and f"(the largest measured was {view.largest_prompt:,})" in item
               for item in decide(public_record(report)).does_not_prove)
