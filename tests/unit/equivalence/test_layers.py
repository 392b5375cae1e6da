"""The promotion rule over the three layers: exact, tokens and tasks blocking, layers not measured,
and the same words in the terminal lines, the JSON, junit and the HTML page."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pytest_vllmqual.ab.decision import _with_equivalence
from pytest_vllmqual.equivalence import PromotionSettings, layer_cases, layers_lines, promotion_section
from pytest_vllmqual.equivalence.layers import depth_trend, exact_rule, tasks_rule
from pytest_vllmqual.not_measured import Measured, equivalence_blocks, equivalence_unmeasured
from pytest_vllmqual.records import Verdict
from pytest_vllmqual.report.html_layers import layers_html
from pytest_vllmqual.report.junit import equivalence_junit
from pytest_vllmqual.words import PromotionRule


def _figure(key: str, low: float, high: float, floor: tuple[float, float] | None, *, exact: bool = True,
            status: str = "beyond") -> dict[str, Any]:
    within = None if floor is None else (low <= floor[1] and floor[0] <= high)
    return {"figure": key, "label": key, "point": (low + high) / 2, "low": low, "high": high, "exact": exact,
            "status": status, "threshold": 97.67, "floor": {"low": floor[0], "high": floor[1]} if floor else None,
            "within_floor": within}


def _bucket(lo: int, hi: int, top1: tuple[float, float], verdict: str = "not equivalent") -> dict[str, Any]:
    return {"from": lo, "to": hi, "windows": 8, "verdict": verdict, "reasons": [f"top-1 {top1}"],
            "figures": [_figure("top1_agreement", *top1, None, status="beyond")]}


def _block(key: str, verdict: str, *, carried: bool = True) -> dict[str, Any]:
    family = {"family": "lists", "status": verdict, "reason": f"{verdict} at 3 points", "paired": 60,
              "accuracy_pct": {"control": {"point": 30.0, "low": 19.0, "high": 43.0},
                               "candidate": {"point": 28.3, "low": 17.5, "high": 41.4}},
              "difference_points": {"candidate_minus_control": {"point": -1.7, "low": -6.0, "high": 2.4}},
              "b": 3, "c": 2}
    return {"block": key, "label": key.replace("_", " "), "verdict": verdict, "reasons": [f"overall: {verdict}"],
            "carried": carried, "families": [family] if carried else [],
            "overall": {**family, "family": "overall"} if carried else None}


def section(*, tokens: str = "not equivalent", items: str = "non-inferior", replay: str | None = None,
            buckets: list[dict[str, Any]] | None = None, floor: bool = True) -> dict[str, Any]:
    """A comparison's equivalence section: the figures of a lossy change (beyond their thresholds and
    outside the A/A floor unless ``tokens`` is equivalent), the task blocks and depth buckets given."""
    outside = tokens != "equivalent"
    top1 = _figure("top1_agreement", 91.0, 93.0 if outside else 100.0, (100.0, 100.0) if floor else None,
                   status="beyond" if outside else "within")
    blocks = [_block("items", items), _block("tool_replay", replay) if replay else _block("tool_replay", "not measured",
                                                                                           carried=False)]
    buckets = buckets if buckets is not None else [_bucket(0, 512, (90.0, 94.0)), _bucket(512, 1024, (89.0, 93.0))]
    return {"verdict": tokens, "reasons": [f"top-1 agreement {tokens}"], "figures": [top1],
            "floor": {"status": "measured" if floor else "not measured", "reason": "A/A"},
            "tasks": {"verdict": items, "reasons": [f"item bank: {items}"], "blocks": blocks,
                      "settings": {"non_inferiority_margin_points": 3.0}},
            "depth": {"verdict": "not equivalent", "reasons": ["deep"], "buckets": buckets,
                      "floor": {"status": "not measured"}}}


def decided(body: dict[str, Any], rule: PromotionRule) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["promotion"] = promotion_section(out, PromotionSettings(rule, f"test: {rule}"))
    return out


def test_the_default_rule_is_tokens_and_the_recipe_names_another() -> None:
    assert PromotionSettings().rule is PromotionRule.TOKENS
    assert PromotionSettings.from_recipe({"promotion": "tasks"}).rule is PromotionRule.TASKS
    assert PromotionSettings.from_recipe({"promotion": "exact"}, recipe="this run's recipe").source == \
        "this run's recipe's compare.promotion"
    assert PromotionSettings.from_recipe({"promotion": "bogus"}) == PromotionSettings()
    assert PromotionSettings.from_recipe(None) == PromotionSettings()


@pytest.mark.parametrize(("rule", "status", "verdict"), [
    (PromotionRule.TOKENS, "failed", Verdict.NO_PROMOTION),
    (PromotionRule.EXACT, "failed", Verdict.NO_PROMOTION),
    (PromotionRule.TASKS, "passed", Verdict.PROMOTABLE),
])
def test_a_lossy_change_with_good_tasks_blocks_only_under_the_rule_that_says_so(
        rule: PromotionRule, status: str, verdict: Verdict) -> None:
    body = decided(section(), rule)
    assert body["promotion"]["status"] == status
    assert [r["blocks"] for r in body["promotion"]["rules"]] == [r is rule for r in PromotionRule]
    reasons: list[str] = []
    proves: list[str] = []
    assert _with_equivalence(body, Verdict.PROMOTABLE, reasons, proves, []) is verdict
    assert equivalence_blocks(body) is Measured(status)


def test_exact_needs_the_floor_and_passes_within_it() -> None:
    assert exact_rule(section(floor=False))[0] is Measured.NOT_MEASURED
    assert exact_rule(section(tokens="equivalent"))[0] is Measured.PASSED
    status, reasons = exact_rule(section())
    assert status is Measured.FAILED and reasons == ["top1_agreement [91, 93] outside the A/A floor [100, 100]"]


def test_tasks_fails_on_inferior_items_or_a_deeper_bucket_worse_than_the_shallowest() -> None:
    assert tasks_rule(section(items="inferior"))[0] is Measured.FAILED
    worse = [_bucket(0, 512, (95.0, 98.0)), _bucket(512, 1024, (80.0, 90.0))]
    status, reasons = tasks_rule(section(buckets=worse))
    assert status is Measured.FAILED
    assert reasons[0] == "depth: (512, 1024] top-1 85.0% [80.0, 90.0] below the shallowest bucket's [95.0, 98.0]"


@pytest.mark.parametrize(("body", "why"), [
    (section(items="inconclusive"), "item bank: inconclusive"),
    (section(replay="inconclusive"), "tool-call replay: inconclusive"),
    (section(buckets=[_bucket(0, 512, (90.0, 94.0))]), "depth: 1 depth bucket compared"),
    (section(buckets=[]), "depth: 0 depth buckets compared"),
])
def test_tasks_with_a_part_not_measured_is_not_measured_never_a_pass(body: dict[str, Any], why: str) -> None:
    status, reasons = tasks_rule(body)
    assert status is Measured.NOT_MEASURED and reasons[0].startswith(why), reasons


def test_a_tool_replay_neither_arm_ran_is_left_out_and_one_that_ran_counts() -> None:
    assert tasks_rule(section())[0] is Measured.PASSED
    assert tasks_rule(section(replay="non-inferior"))[0] is Measured.PASSED
    assert tasks_rule(section(replay="inferior"))[0] is Measured.FAILED


def test_a_bucket_short_of_windows_leaves_the_depth_part_not_measured() -> None:
    short = _bucket(512, 1024, (89.0, 93.0))
    short["figures"][0]["status"] = "too few units"
    assert depth_trend({"buckets": [_bucket(0, 512, (90.0, 94.0)), short]})[0] is Measured.NOT_MEASURED


def test_a_blocking_rule_not_measured_caps_below_promotable_and_is_said_last() -> None:
    body = decided(section(items="inconclusive"), PromotionRule.TASKS)
    reasons: list[str] = []
    assert _with_equivalence(body, Verdict.PROMOTABLE, reasons, [], []) is Verdict.HEALTHY
    assert reasons == ["capped below promotable: compare.promotion tasks not measured (item bank: inconclusive: "
                       "overall: inconclusive; depth: no bucket of 2 is worse than the shallowest)"]
    found = equivalence_unmeasured("equivalence (A/B comparison)", body)
    assert found is not None and found.line().startswith(
        "equivalence (A/B comparison): not measured: compare.promotion tasks: item bank: inconclusive")


def test_every_layer_is_reported_and_only_the_rule_blocks() -> None:
    body = decided(section(), PromotionRule.TASKS)
    assert [(x["layer"], x["verdict"], x["status"]) for x in body["promotion"]["layers"]] == [
        ("tokens", "not equivalent", "failed"), ("tasks", "non-inferior", "passed"),
        ("depth", "not equivalent", "failed")]


def test_terminal_json_junit_and_page_say_the_same_words() -> None:
    body = decided(section(items="inconclusive"), PromotionRule.TASKS)
    promotion = body["promotion"]
    lines = layers_lines(body)
    assert lines[0] == (f"promotion (compare.promotion tasks; test: tasks): not measured: {promotion['reasons'][0]}")
    for layer in promotion["layers"]:
        assert f"  layer {layer['layer']}: {layer['verdict']} ({layer['status']}): {layer['reason']}" in lines
    junit = ET.fromstring(equivalence_junit(body, "line"))
    cases = {(c.get("classname"), c.get("name")): c for c in junit.iter("testcase")}
    expected = {"passed": None, "failed": "failure", "not measured": "skipped"}
    for layer in promotion["layers"]:
        case = cases[("equivalence.layer", layer["layer"])]
        assert [child.tag for child in case] == ([expected[layer["status"]]] if expected[layer["status"]] else [])
    assert ("equivalence.tasks items", "lists") in cases and ("equivalence.depth", "(512, 1024]") in cases
    assert cases[("equivalence.promotion", "rule tasks (blocking)")].find("skipped") is not None
    page = layers_html(body)
    assert 'id="equivalence-promotion-status">not measured<' in page
    for layer in promotion["layers"]:
        assert f"<td>{layer['layer']}</td><td>{layer['verdict']}</td><td>{layer['status']}</td>" in page
    # the three rules, the three layers, the item bank's family and overall (no replay ran), two buckets
    assert len(layer_cases(body)) == 3 + 3 + 2 + 2


def test_the_forest_plot_draws_each_family_and_the_margin() -> None:
    page = layers_html(decided(section(replay="non-inferior"), PromotionRule.TOKENS))
    assert '<svg id="equivalence-forest"' in page and page.count('<g class="family">') == 4
    assert "−3 (margin)" in page and '<svg id="equivalence-depth-top1"' in page
    assert page.count('<g class="bucket">') == 2


def test_needle_accuracy_by_depth_is_drawn_per_arm() -> None:
    body = decided(section(), PromotionRule.TOKENS)
    body["tasks"]["by_depth"] = [{"tokens": 1024, "items": 3, "accuracy_pct": {
        "control": {"point": 66.7, "low": 9.4, "high": 99.2}, "candidate": {"point": 33.3, "low": 0.8, "high": 90.6}}}]
    page = layers_html(body)
    assert '<svg id="equivalence-needle-depth"' in page
    assert page.count('<g class="needle control">') == 1 and page.count('<g class="needle candidate">') == 1
