"""A campaign qualifies a pinned arm: an arm whose verdict is at least healthy but whose run is
not pinned does not qualify, and the record, the exit and the terminal's line say why. Gates a
declaration excused are said excused, never counted as passed."""

from __future__ import annotations

import copy
import json
from typing import Any

from support import ROOT, UNIT_DATA
from support.campaign_samples import pin_revision

from pytest_vllmqual.campaign.decision import CampaignPlan, requalify
from pytest_vllmqual.campaign.qualify import campaign_line
from pytest_vllmqual.campaign.requirements import evaluate_requirement
from pytest_vllmqual.campaign.spec import Campaign, CampaignArm
from pytest_vllmqual.report.decision import decide, public_record
from pytest_vllmqual.report.public import validate_report
from pytest_vllmqual.report.query import preflight_summary

GPU_TP1 = ROOT / "reports" / "examples" / "gpu-tp1"
REFERENCE_REPORTS = UNIT_DATA / "reference_reports"
CAMPAIGN = Campaign([CampaignArm("393k-fp8kv", requires=["startup", "kv_pool", "ladder"]),
                     CampaignArm("393k-offload", requires=["startup", "ladder"], fallback_for="393k-fp8kv")], name="393k")


def _load(path: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _arm(name: str, *, pinned: bool = True, kv_tokens: int = 400_000) -> dict[str, Any]:
    """The reference control report as a 393K arm that met startup, kv_pool and ladder; healthy."""
    report = _load(REFERENCE_REPORTS / "control-8192.json")
    report["run"]["arm"] = report["recipe"]["name"] = report["recipe"]["content"]["name"] = name
    report["recipe"]["content"]["serve"]["max_model_len"] = 393216
    report["recipe"]["content"]["gates"]["capacity"]["min_largest_prompt"] = 100_000
    if not pinned:
        report["recipe"]["content"]["pinned"] = False
    report["engine"]["kv_cache_tokens"] = kv_tokens
    pin_revision(report)
    report["preflight"] = preflight_summary(report)
    report["decision"] = decide(public_record(report)).to_dict()
    validate_report(report)
    return report


def _record(reports: dict[str, dict[str, Any]], failed_tests: int | None = None) -> dict[str, Any]:
    plan = CampaignPlan(CAMPAIGN)
    plan.next_arm(reports)
    return plan.record(failed_tests=failed_tests)


def test_a_pinned_healthy_arm_qualifies() -> None:
    record = _record({"393k-fp8kv": _arm("393k-fp8kv")})
    assert record["arms"][0]["verdict"] == "healthy" and record["arms"][0]["qualifies"] is True
    assert record["qualified"] == "393k-fp8kv" and record["exit"]["code"] == 0


def test_an_unpinned_healthy_arm_does_not_qualify_and_the_record_says_why() -> None:
    record = _record({"393k-fp8kv": _arm("393k-fp8kv", pinned=False)})
    arm = record["arms"][0]
    assert arm["status"] == "passed" and arm["verdict"] == "healthy"
    assert arm["qualifies"] is False, arm["qualification"]
    assert "not pinned: the recipe says pinned: false" in arm["qualification"]
    assert record["qualified"] is None
    assert record["exit"]["code"] == 1
    assert record["exit"]["reason"].startswith("no arm qualified: 393k-fp8kv ")
    assert "not pinned" in record["exit"]["reason"]
    assert campaign_line(record) == f"campaign: {record['exit']['reason']}; exit 1"


def test_an_unpinned_fallback_does_not_stand_in_for_its_primary() -> None:
    record = _record({"393k-fp8kv": _arm("393k-fp8kv", kv_tokens=283_917),
                      "393k-offload": _arm("393k-offload", pinned=False, kv_tokens=283_917)}, failed_tests=1)
    assert record["arms"][0]["status"] == "failed" and record["arms"][1]["status"] == "passed"
    assert record["arms"][1]["qualifies"] is False and record["qualified"] is None
    assert record["exit"]["code"] == 1 and "not pinned" in record["exit"]["reason"]


def test_the_committed_rerun_campaign_does_not_qualify_its_unpinned_arm() -> None:
    """reports/examples/gpu-tp1/rerun-2026-12-04: the 393K FP8-KV arm is healthy, but its recipe
    says pinned: false; the campaign qualifies nothing and exits 1."""
    folder = GPU_TP1 / "rerun-2026-12-04"
    record = _load(folder / "campaign-393k.json")
    report = _load(folder / "tiny-gpu-393k-fp8kv.json")
    assert report["recipe"]["content"]["pinned"] is False
    again = requalify(record, {"tiny-gpu-393k-fp8kv": report})
    arm = again["arms"][0]
    assert arm["status"] == "passed" and arm["verdict"] == "healthy"
    assert arm["qualifies"] is False and "not pinned: the recipe says pinned: false" in arm["qualification"]
    assert again["qualified"] is None and again["exit"]["code"] == 1
    assert again["exit"]["reason"].startswith("no arm qualified: tiny-gpu-393k-fp8kv")


def test_the_gates_requirement_says_which_gates_a_declaration_excused() -> None:
    """reports/examples/gpu-tp1/verdicts-2026-12-04: the two declared quality checks measured failing;
    the requirement is met, and says they were excused, not that every gate passed."""
    report = _load(GPU_TP1 / "verdicts-2026-12-04" / "tiny-gpu-393k-fp8kv.json")
    requirement = evaluate_requirement(report, "gates")
    assert requirement.ok is True
    assert not requirement.detail.startswith("every gate that ran passed ("), requirement.detail
    assert "excused by a declaration" in requirement.detail
    assert "measured failing under a declaration: quality_intelligence, quality_session_recall" in requirement.detail


def test_an_arm_that_qualifies_with_excused_gates_names_them() -> None:
    report = _load(GPU_TP1 / "verdicts-2026-12-04" / "tiny-gpu-393k-fp8kv.json")
    record = _load(GPU_TP1 / "verdicts-2026-12-04" / "campaign-393k.json")
    again = requalify(record, {"tiny-gpu-393k-fp8kv": copy.deepcopy(report)})
    arm = again["arms"][0]
    assert arm["qualifies"] is True
    assert ("measured failing under a declaration: quality_intelligence, quality_session_recall"
            in arm["qualification"]), arm["qualification"]
