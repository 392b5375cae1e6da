"""Campaign order with stop conditions and a fallback, decided from arm reports."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, UNIT_DATA
from support.campaign_samples import pin_revision

from pytest_vllmqual.campaign.decision import CampaignPlan, decide_arms, requalify
from pytest_vllmqual.campaign.qualify import campaign_line, qualified_by_fallback
from pytest_vllmqual.campaign.requirements import evaluate_requirement
from pytest_vllmqual.campaign.spec import (
    Campaign,
    CampaignArm,
    campaigns_dir,
    load_campaign,
    load_campaign_file,
    parse_campaign_spec,
)
from pytest_vllmqual.errors import CampaignError
from pytest_vllmqual.report.decision import decide, public_record
from pytest_vllmqual.report.public import validate_report
from pytest_vllmqual.report.query import preflight_summary

REFERENCE_REPORTS = UNIT_DATA / "reference_reports"


def arm_report(name: str, *, kv_tokens: int | None, largest: int | None, smoke: str = "passed",
               min_kv: int | None = 393216, min_prompt: int | None = 300000) -> dict[str, Any]:
    """The reference campaign's control report, re-labelled as a 393K arm with the given KV pool and largest prompt."""
    report: dict[str, Any] = json.loads((REFERENCE_REPORTS / "control-8192.json").read_text())
    report["run"]["arm"] = report["recipe"]["name"] = name
    content = report["recipe"]["content"]
    content["name"] = name
    content["serve"]["max_model_len"] = 393216
    content["gates"]["engine"]["min_kv_tokens"] = min_kv
    content["gates"]["capacity"]["min_kv_tokens"] = min_kv
    content["gates"]["capacity"]["min_largest_prompt"] = min_prompt
    report["engine"]["kv_cache_tokens"] = kv_tokens
    pin_revision(report)
    top = report["ladder"][3]
    top["prompt_tokens"], top["post_probe_smoke"] = largest, smoke
    top["post_probe_smoke_ok"] = smoke == "passed"  # the builder derives the flag from the text
    top["ok"] = largest is not None
    report["ladder_summary"]["largest"] = copy.deepcopy(top) if largest is not None else None
    for gate in report["gates"]:
        if gate["gate"] == "kv_pool":
            gate["thresholds"] = {"min_kv_tokens": min_kv}
            if kv_tokens is not None and min_kv is not None and kv_tokens < min_kv:
                gate["outcome"] = "failed"
                gate["reason"] = f"engine-reported KV pool {kv_tokens:,} tokens is below the recipe minimum {min_kv:,}"
        if gate["gate"] == "ladder" and (largest is None or (min_prompt and largest <= min_prompt)):
            gate["outcome"] = "failed"
            gate["reason"] = f"ladder: largest actual prompt {largest or 0:,} does not exceed the recipe minimum"
    report["preflight"] = preflight_summary(report)
    report["decision"] = decide(public_record(report)).to_dict()
    validate_report(report)
    return report


def startup_failed(name: str) -> dict[str, Any]:
    """An arm whose server never became ready (vLLM refused: the KV pool cannot hold max_model_len)."""
    report = arm_report(name, kv_tokens=None, largest=None)
    report["run"]["status"] = "incomplete"
    report["run"]["status_reasons"] = ["startup failed: kv_insufficient"]
    report["lifecycle"].update(cold_start_s=None, startup_status="kv_insufficient", startup_error={
        "status": "kv_insufficient", "message": "To serve at least one request with max_model_len 393216, "
        "2.3 GiB KV cache is needed, larger than the available 1.0 GiB", "exit_code": 1, "private_log": None,
        "hint": None, "details": {}})
    report["gates"], report["ladder"] = [], []
    report["preflight"] = preflight_summary(report)
    report["ladder_summary"] = {"rungs": 0, "completed": 0, "failed": 0, "rejected_as_expected": 0,
                                "largest": None}
    report["decision"] = decide(public_record(report)).to_dict()
    validate_report(report)
    return report


REFERENCE_CAMPAIGN = Campaign([CampaignArm("393k-fp8kv", requires=["startup", "kv_pool", "ladder"]),
                               CampaignArm("393k-offload", requires=["startup", "ladder"], fallback_for="393k-fp8kv")],
                              name="393k")


# -- the reference campaign's 393K step ------------------------------------------------------------


def test_fallback_runs_because_the_primary_failed_its_kv_pool() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    assert plan.next_arm({}) == "393k-fp8kv"
    primary = arm_report("393k-fp8kv", kv_tokens=283917, largest=310000)
    assert plan.next_arm({"393k-fp8kv": primary}) == "393k-offload"
    pending = plan.record()
    assert pending["pending"] == "393k-offload" and pending["complete"] is False
    assert pending["arms"][1]["reason"] == "393k-offload runs because 393k-fp8kv failed kv_pool: 283,917 < 393,216"
    fallback = arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None)
    assert plan.next_arm({"393k-fp8kv": primary, "393k-offload": fallback}) is None
    record = plan.record()
    assert record["ran"] == ["393k-fp8kv", "393k-offload"]
    assert record["arms"][1]["reason"] == "393k-offload ran because 393k-fp8kv failed kv_pool: 283,917 < 393,216"
    assert record["arms"][0]["status"] == "failed" and record["arms"][1]["status"] == "passed"
    assert record["arms"][0]["requirements"][1] == {"name": "kv_pool", "ok": False, "detail": "283,917 < 393,216"}
    assert record["arms"][1]["requirements"][1]["detail"] == (
        "largest actual prompt 310,000 > 300,000; post-probe smoke passed after 5/5 probes; 1 retained failed rung(s)")
    assert record["outcome"] == "393k-offload met its requirements (startup, ladder)"
    assert record["qualified"] == "393k-offload", "the record names the arm that qualified"
    assert record["complete"] is True and record["stopped"] is None
    assert json.loads(json.dumps(record)) == record


def test_fallback_is_skipped_when_the_primary_passes() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    primary = arm_report("393k-fp8kv", kv_tokens=400000, largest=310000)
    assert plan.next_arm({"393k-fp8kv": primary}) is None
    record = plan.record()
    assert record["ran"] == ["393k-fp8kv"] and record["skipped"] == ["393k-offload"]
    assert record["arms"][1]["reason"] == ("393k-offload skipped: 393k-fp8kv passed startup, kv_pool, ladder, so its "
                                           "fallback is not needed")
    assert record["arms"][0]["requirements"][1]["detail"] == "400,000 ≥ 393,216"
    assert record["qualified"] == "393k-fp8kv"


def test_a_startup_failure_fails_kv_pool_and_names_the_cause() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    assert plan.next_arm({"393k-fp8kv": startup_failed("393k-fp8kv")}) == "393k-offload"
    reason = plan.record()["arms"][1]["reason"]
    assert reason.startswith("393k-offload runs because 393k-fp8kv failed startup: startup failed (kv_insufficient)")
    assert "kv_pool: the engine reported no KV pool (startup failed (kv_insufficient)" in reason


def test_ladder_needs_a_prompt_above_the_floor_and_passing_post_probe_smokes() -> None:
    short = arm_report("393k-fp8kv", kv_tokens=400000, largest=119503)
    assert evaluate_requirement(short, "ladder").detail.startswith("largest actual prompt 119,503 ≤ 300,000")
    broken = arm_report("393k-fp8kv", kv_tokens=400000, largest=310000, smoke="failed")
    result = evaluate_requirement(broken, "ladder")
    assert not result.ok and result.detail == "post-probe smoke failed after 1 rung(s)"


def test_when_the_fallback_also_fails_no_arm_passed() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    reports = {"393k-fp8kv": arm_report("393k-fp8kv", kv_tokens=283917, largest=119503),
               "393k-offload": arm_report("393k-offload", kv_tokens=283917, largest=119503, min_kv=None)}
    assert plan.next_arm(reports) is None
    record = plan.record()
    assert record["outcome"] == "no arm met its requirements"
    assert record["qualified"] is None
    assert record["ran"] == ["393k-fp8kv", "393k-offload"]


# -- stop conditions ---------------------------------------------------------------------------------


def test_a_failed_arm_without_fallback_stops_the_campaign() -> None:
    campaign = parse_campaign_spec("131k-control,393k-fp8kv:kv_pool,393k-quality")
    plan = CampaignPlan(campaign)
    control = arm_report("131k-control", kv_tokens=400000, largest=310000)
    assert plan.next_arm({"131k-control": control}) == "393k-fp8kv"
    assert plan.record()["arms"][1]["reason"] == "393k-fp8kv runs after 131k-control passed"
    failed = arm_report("393k-fp8kv", kv_tokens=283917, largest=310000)
    assert plan.next_arm({"131k-control": control, "393k-fp8kv": failed}) is None
    record = plan.record()
    assert record["skipped"] == ["393k-quality"]
    assert record["stopped"] == "campaign stopped: 393k-fp8kv failed kv_pool: 283,917 < 393,216 and has no fallback"
    assert record["arms"][2]["reason"] == record["stopped"]
    with pytest.raises(CampaignError, match="there is a report for arm 393k-quality, but the campaign skipped it"):
        decide_arms(campaign, {"131k-control": control, "393k-fp8kv": failed,
                         "393k-quality": arm_report("393k-quality", kv_tokens=400000, largest=310000)})


def test_continue_and_stop_flags() -> None:
    failed = arm_report("a", kv_tokens=283917, largest=310000)
    passed = arm_report("b", kv_tokens=400000, largest=310000)
    keep_going = parse_campaign_spec("a:kv_pool?continue,b:kv_pool?stop,c")
    plan = CampaignPlan(keep_going)
    assert plan.next_arm({"a": failed}) == "b"
    assert plan.next_arm({"a": failed, "b": passed}) is None
    record = plan.record()
    assert record["stopped"] == "campaign stopped: b passed kv_pool (stop on success)"
    assert record["skipped"] == ["c"]


def test_reports_can_be_a_list_keyed_by_run_arm() -> None:
    primary = arm_report("393k-fp8kv", kv_tokens=283917, largest=310000)
    assert CampaignPlan(REFERENCE_CAMPAIGN).next_arm([primary]) == "393k-offload"
    with pytest.raises(CampaignError, match="not arms of this campaign"):
        CampaignPlan(REFERENCE_CAMPAIGN).next_arm({"131k-4096": primary})


def test_default_requirement_is_every_gate_passed_and_a_complete_run() -> None:
    report = arm_report("a", kv_tokens=283917, largest=310000)
    requirement = evaluate_requirement(report, "gates")
    assert not requirement.ok
    assert requirement.detail.startswith("gate kv_pool failed: engine-reported KV pool 283,917 tokens")
    assert evaluate_requirement(startup_failed("a"), "gates").detail.startswith("the run is incomplete")
    assert evaluate_requirement(report, "quality_tools").detail == "passed"
    assert evaluate_requirement(report, "concurrency").detail == "did not run"
    assert evaluate_requirement(report, "preflight").detail == "6/6"


# -- spec formats -------------------------------------------------------------------------------------


def test_string_spec_parses_fallback_requirements_and_flags() -> None:
    campaign = parse_campaign_spec("393k-fp8kv,393k-offload?fallback")
    assert campaign.names == ["393k-fp8kv", "393k-offload"]
    assert campaign.arm("393k-offload").fallback_for == "393k-fp8kv"
    assert tuple(campaign.arm("393k-fp8kv").requires) == ("gates",)
    full = parse_campaign_spec("x:startup+kv_pool+ladder?recipe=393k-fp8kv,y:ladder?fallback=x?continue,z?stop")
    assert full.arm("x").recipe_name == "393k-fp8kv" and tuple(full.arm("x").requires) == ("startup", "kv_pool",
                                                                                               "ladder")
    assert full.arm("y").fallback_for == "x" and full.arm("y").stop_on_failure is False
    assert full.arm("z").stop_on_success is True
    assert parse_campaign_spec(full.spec()) == full


@pytest.mark.parametrize(("spec", "message"), [
    ("", "names no arm"),
    ("a?fallback", "needs an earlier non-fallback arm"),
    ("a,b?fallback=c", "which is not an arm of this campaign"),
    ("b?fallback=a,a", "which is a later arm"),
    ("a,a", "appears twice"),
    ("a?later", "unknown flag"),
    ("a:kv pool", "are not gate names"),
    ("bad name!", "not a recipe-style name"),
])
def test_bad_specs_name_the_problem_and_the_fix(spec: str, message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        parse_campaign_spec(spec)


def test_the_393k_campaign_file(tmp_path: Path) -> None:
    campaign = load_campaign("393k", search_dirs=[campaigns_dir(ROOT)])
    assert campaign.name == "393k"
    assert campaign.spec() == "393k-fp8kv:startup+kv_pool+ladder,393k-offload:startup+ladder?fallback=393k-fp8kv"
    assert load_campaign(str(ROOT / "fixtures" / "campaigns" / "393k.yaml")).spec() == campaign.spec()
    assert load_campaign("393k-fp8kv,393k-offload?fallback", search_dirs=[tmp_path]).names == campaign.names
    for recipe in campaign.names:
        assert (ROOT / "fixtures" / "recipes" / f"{recipe}.yaml").is_file()


@pytest.mark.parametrize(("text", "message"), [
    ("arms: []", "key 'arms': .* should be non-empty"),
    ("name: x\narms: [{name: a, needs: [kv_pool]}]", "unknown key 'arms.0.needs'. Fix: remove it"),
    ("name: x\narms: [a]\nrunners: []", "unknown key 'runners'. Fix: remove it"),
    ("arms: [{requires: [ladder]}]", "missing required key 'arms.0.name'"),
    ("arms: [{name: a, requires: ladder}]", "key 'arms.0.requires' must be of type array"),
    ("arms: [{name: a, stop_on_success: 'yes'}]", "key 'arms.0.stop_on_success' must be of type boolean"),
    ("arms: [{name: a, requires: ['kv pool']}]", "key 'arms.0.requires.0' is 'kv pool', which does not have the form"),
    ("arms: [{name: a, fallback_for: 3}]", "key 'arms.0.fallback_for' must be of type string or null"),
    ("arms: [a, {name: b, fallback_for: c}]", "not an arm of this campaign"),
    ("arms: [\n  - {name: a", "is not valid YAML"),
    ("- a", "must be a mapping"),
])
def test_bad_campaign_files_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CampaignError, match=message):
        load_campaign_file(path)
    with pytest.raises(CampaignError, match="cannot be read"):
        load_campaign_file(tmp_path / "absent.yaml")


def test_a_qualified_fallback_is_named_for_the_exit_code() -> None:
    """The session exits 0 when the fallback qualified in place of the failed primary (plugin._campaign_exit)."""
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    reports = {"393k-fp8kv": arm_report("393k-fp8kv", kv_tokens=283917, largest=310000),
               "393k-offload": arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None)}
    plan.next_arm(reports)
    assert qualified_by_fallback(plan.record()) == "393k-offload"
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    reports["393k-offload"] = arm_report("393k-offload", kv_tokens=283917, largest=119503, min_kv=None)
    plan.next_arm(reports)
    assert qualified_by_fallback(plan.record()) is None  # the fallback failed too
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    plan.next_arm({"393k-fp8kv": arm_report("393k-fp8kv", kv_tokens=400000, largest=310000)})
    assert qualified_by_fallback(plan.record()) is None  # nothing failed: the exit code is the session's own
    plan = CampaignPlan(parse_campaign_spec("131k-control,393k-fp8kv:kv_pool,393k-quality"))
    plan.next_arm({"131k-control": arm_report("131k-control", kv_tokens=400000, largest=310000),
                   "393k-fp8kv": arm_report("393k-fp8kv", kv_tokens=283917, largest=310000)})
    assert qualified_by_fallback(plan.record()) is None  # a failed arm without a fallback


# -- which arm qualifies, and the exit code ------------------------------------------------------------


def with_failed_gate(report: dict[str, Any], gate: str, reason: str = "a real failure") -> dict[str, Any]:
    """The report with one more gate failed, decided again (its verdict drops to no-promotion)."""
    report = copy.deepcopy(report)
    for record in report["gates"]:
        if record["gate"] == gate:
            record["outcome"], record["reason"] = "failed", reason
    report["preflight"] = preflight_summary(report)
    report["decision"] = decide(public_record(report)).to_dict()
    validate_report(report)
    return report


EXAMPLES_TP1 = ROOT / "reports" / "examples" / "gpu-tp1"


def test_the_committed_393k_campaign_does_not_qualify_an_arm_whose_tools_gate_failed() -> None:
    """reports/examples/gpu-tp1/campaign-393k.json: the FP8-KV arm met startup, kv_pool and ladder, but its
    own report is no-promotion (tools 19/20). It does not qualify, its fallback is not run (requires
    decide only that), and the campaign's exit is 1 with the reason."""
    record = json.loads((EXAMPLES_TP1 / "campaign-393k.json").read_text())
    report = json.loads((EXAMPLES_TP1 / "tiny-gpu-393k-fp8kv.json").read_text())
    assert report["decision"]["verdict"] == "no-promotion"
    again = requalify(record, {"tiny-gpu-393k-fp8kv": report})
    arm = again["arms"][0]
    assert arm["status"] == "passed" and arm["qualifies"] is False and arm["failed_gates"] == ["tools"]
    assert arm["qualification"].startswith("met its requirements, but its verdict is no-promotion (failed: tools)")
    assert again["arms"][1]["status"] == "skipped" and again["qualified"] is None
    assert again["exit"]["code"] == 1 and again["exit"]["reason"].startswith(
        "no arm qualified: tiny-gpu-393k-fp8kv met its requirements, but its verdict is no-promotion")
    assert campaign_line(again) == f"campaign: {again['exit']['reason']}; exit 1"
    assert record == {**again, "reports": record["reports"]}, "the committed record is carried forward"


def test_a_fallback_that_stood_in_for_the_kind_of_failure_it_exists_for_exits_0() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    primary = arm_report("393k-fp8kv", kv_tokens=283917, largest=310000)
    reports = {"393k-fp8kv": primary,
               "393k-offload": arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None)}
    plan.next_arm(reports)
    record = plan.record(failed_tests=1)
    assert record["qualified"] == "393k-offload" and record["arms"][1]["qualifies"] is True
    assert record["exit"] == {"code": 0, "accepted_failures": 1, "reason": "393k-offload qualified (fallback for "
                                                                            "393k-fp8kv, which failed kv_pool)"}
    assert plan.record(failed_tests=2)["exit"]["code"] == 1, "a failed test outside what the fallback stands in for"


def test_a_primary_that_also_failed_another_gate_keeps_the_exit_1_though_its_fallback_qualifies() -> None:
    """The tiny-cpu fallback campaign once printed "2 failed, 10 passed" and exited 0: the fallback
    stands in for the primary's KV pool, not for a second failure the primary had besides."""
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    primary = with_failed_gate(arm_report("393k-fp8kv", kv_tokens=283917, largest=310000), "tools")
    reports = {"393k-fp8kv": primary,
               "393k-offload": arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None)}
    plan.next_arm(reports)
    record = plan.record(failed_tests=2)
    assert record["qualified"] == "393k-offload"
    assert record["exit"]["code"] == 1
    assert record["exit"]["reason"] == ("393k-offload qualified, but 393k-fp8kv also failed tools, which its fallback "
                                        "does not stand in for (it failed kv_pool)")


def test_a_fallback_that_met_its_requirements_with_a_failed_gate_does_not_qualify() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    fallback = with_failed_gate(arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None), "json")
    plan.next_arm({"393k-fp8kv": arm_report("393k-fp8kv", kv_tokens=283917, largest=310000),
                   "393k-offload": fallback})
    record = plan.record(failed_tests=2)
    assert record["arms"][1]["status"] == "passed" and record["arms"][1]["qualifies"] is False
    assert record["qualified"] is None and qualified_by_fallback(record) is None and record["exit"]["code"] == 1


def test_a_primary_that_never_started_is_stood_in_for_whatever_its_gates_say() -> None:
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    primary = startup_failed("393k-fp8kv")
    primary["gates"] = [{**g, "outcome": "error", "reason": "the server did not start"}
                        for g in arm_report("393k-fp8kv", kv_tokens=400000, largest=310000)["gates"][:3]]
    plan.next_arm({"393k-fp8kv": primary,
                   "393k-offload": arm_report("393k-offload", kv_tokens=283917, largest=310000, min_kv=None)})
    record = plan.record(failed_tests=3)
    assert record["qualified"] == "393k-offload"
    assert record["exit"]["code"] == 0 and record["exit"]["accepted_failures"] == 3


def test_the_record_names_the_gates_each_arm_did_not_run() -> None:
    report = arm_report("393k-fp8kv", kv_tokens=400000, largest=310000)
    report["decision"]["gates"].append({"gate": "load", "family": "load", "title": "Load at SLO (goodput)",
                                        "outcome": "absent", "reason": "deselected by -m 'not load'"})
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    plan.next_arm({"393k-fp8kv": report})
    arm = plan.record()["arms"][0]
    assert {"gate": "load", "reason": "deselected by -m 'not load'"} in arm["gates_not_run"]
    assert "did not run: " in arm["qualification"] and "load" in arm["qualification"]


def test_a_bad_campaign_file_gets_one_line_naming_the_file_the_key_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("name: typo\narms:\n  - {name: a, requires: [startup]}\n  - {name: b, fallback: a}\n")
    with pytest.raises(CampaignError) as err:
        load_campaign_file(path)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"campaign file {path}: unknown key 'arms.1.fallback'")
    assert "Fix: rename it to 'fallback_for'" in text


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures" / "campaigns").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_campaign_file_matches_the_campaign_schema(path: Path) -> None:
    import yaml

    from pytest_vllmqual.layout import schema_errors

    assert schema_errors(yaml.safe_load(path.read_text()), "campaign.schema.yaml") == []
    campaign = load_campaign_file(path)
    assert campaign.name == path.stem and len(campaign.arms) >= 2
    assert all(arm.fallback_for is None or arm.fallback_for in campaign.names for arm in campaign.arms)


def test_a_campaign_file_fills_the_schema_defaults_and_keeps_string_arms(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text("arms:\n  - first:startup\n  - {name: second, fallback_for: first}\n")
    campaign = load_campaign_file(path)
    assert campaign.name == "mixed" and campaign.description == ""
    second = campaign.arm("second")
    assert tuple(second.requires) == ("gates",) and second.stop_on_failure and not second.stop_on_success
    assert campaign.spec() == "first:startup,second?fallback=first"


def test_an_arm_status_is_a_typed_word_and_the_record_keeps_the_plain_words() -> None:
    from pytest_vllmqual.records import ArmStatus

    passed = arm_report("393k-fp8kv", kv_tokens=400_000, largest=310_000)
    plan = CampaignPlan(REFERENCE_CAMPAIGN)
    plan.next_arm({"393k-fp8kv": passed})
    statuses = [d.status for d in plan.decisions()]
    assert all(isinstance(s, ArmStatus) for s in statuses)
    record = json.loads(json.dumps(plan.record()))
    assert [arm["status"] for arm in record["arms"]] == [str(s) for s in statuses]
    assert {arm["status"] for arm in record["arms"]} <= {"passed", "failed", "skipped", "pending", "waiting"}
    assert ArmStatus.PASSED.ran and ArmStatus.FAILED.ran and not ArmStatus.SKIPPED.ran
