"""The comparison's equivalence section on synthetic probe answers: the verdict words, the A/A
floor, not measurable (no probe, K = 0, another tokenizer or checkpoint), the decision's cap,
the terminal line and the junit file."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support import UNIT_DATA
from support.equivalence_samples import attach_probe, depth_body, probe_body

from pytest_vllmqual.ab.compare import compare_reports, render_markdown
from pytest_vllmqual.equivalence.comparison import (
    equivalence_section,
    flip_items,
    needle_by_depth,
    sidecar_arm,
    summary_line,
)
from pytest_vllmqual.equivalence.depth_figures import depth_lines
from pytest_vllmqual.equivalence.verdict import Thresholds
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.report.junit import equivalence_junit

Arms = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


REFERENCE_REPORTS = UNIT_DATA / "reference_reports"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REFERENCE_REPORTS / name).read_text())
    return data


@pytest.fixture
def arms() -> Arms:
    return _load("control-8192.json"), _load("candidate-4096.json"), _load("replay-8192.json")


def compare(tmp_path: Path, arms: Arms, control_body: dict[str, Any] | None, candidate_body: dict[str, Any] | None,
            replay_body: dict[str, Any] | None = None, **pins: str | None) -> dict[str, Any]:
    control, candidate, replay = arms
    for role, report, body in (("control", control, control_body), ("candidate", candidate, candidate_body),
                               ("replay", replay, replay_body)):
        if body is not None:
            attach_probe(report, tmp_path, role, body, pin=pins.get(role, "ab" * 32))
    return compare_reports(control, candidate, replay=replay if replay_body is not None else None,
                           sanitizer=Sanitizer(), folders={r: tmp_path for r in ("control", "candidate", "replay")})


def figure(section: dict[str, Any], key: str) -> dict[str, Any]:
    return next(f for f in section["figures"] if f["figure"] == key)


def test_an_exact_repeat_is_equivalent_with_every_figure_at_its_floor(tmp_path: Path, arms: Arms) -> None:
    result = compare(tmp_path, arms, probe_body(), probe_body(), probe_body())
    section = result["equivalence"]
    assert section["verdict"] == "equivalent"
    assert section["floor"]["status"] == "measured"
    for key in ("top1_agreement", "ln_ppl_ratio", "rms_delta_p", "hard_divergence", "flips"):
        checked = figure(section, key)
        assert checked["status"] == "within" and checked["within_floor"] is True
        assert checked["low"] == checked["point"]
        # A bootstrap of identical chunks has nothing to resample; a count of 0 keeps its exact width.
        assert checked["high"] == checked["point"] if checked.get("events") is None else checked["high"] > 0
    assert figure(section, "kl_lower_bound")["status"] == "not shown"  # a lower bound never shows equivalence
    assert section["greedy"]["identical"] == 8
    assert any("answers the equivalence probe as the control does" in p for p in result["decision"]["proves"])


def test_a_shifted_candidate_is_not_equivalent_and_the_comparison_is_no_promotion(tmp_path: Path, arms: Arms) -> None:
    result = compare(tmp_path, arms, probe_body(), probe_body(shift=0.2, swap_top=True, hard_greedy=True))
    section = result["equivalence"]
    assert section["verdict"] == "not equivalent"
    assert figure(section, "top1_agreement")["status"] == "beyond"
    assert figure(section, "ln_ppl_ratio")["status"] == "beyond"
    assert section["floor"] == {"status": "not measured", "reason": "no bracketed replay of the control ran"}
    assert result["verdict"] == "no-promotion"
    assert any(r.startswith("the candidate is not equivalent to the control: top-1 agreement 75.0%")
               for r in result["decision"]["reasons"])
    # Each context length's top-1 is judged here, into the record; the page only shows the word.
    assert [row["top1_status"] for row in section["teacher_forced"]["by_length"]] == \
        ["beyond"] * len(section["teacher_forced"]["by_length"])
    line = summary_line(section)
    assert line.startswith("equivalence: not equivalent: top-1 agreement 75.0% [") and "below 97.7%" in line
    assert "A/A floor not measured" in line
    assert "### Output equivalence" in render_markdown(result)
    suite = ET.fromstring(equivalence_junit(section, line)).find("testsuite")
    assert suite is not None and int(suite.get("failures") or 0) >= 3


def test_the_section_carries_the_depth_buckets_with_their_floor_beside_the_verdict(tmp_path: Path,
                                                                                    arms: Arms) -> None:
    """Depth is reported per bucket with the A/A floor; it does not change the equivalence verdict."""
    def body(**depth: Any) -> dict[str, Any]:
        return {**probe_body(), "depth": depth_body(**depth)}

    section = compare(tmp_path, arms, body(), body(shift=0.2, deep_shift_only=True), body())["equivalence"]
    assert section["verdict"] == "equivalent"
    depth = section["depth"]
    assert depth["verdict"] == "not equivalent" and depth["floor"] == {"status": "measured"}
    assert [(b["to"], b["verdict"], b["floor"]) for b in depth["buckets"]] == [
        (64, "equivalent", "measured"), (128, "not equivalent", "measured")]
    lines = depth_lines(section)
    assert lines[0] == "depth: not equivalent"
    assert lines[2].startswith("  (64, 128]: not equivalent, 8 windows: top-1 agreement 100.0% [100.0, 100.0]; ")
    without = compare(tmp_path / "plain", arms, probe_body(), probe_body())["equivalence"]
    assert without["depth"]["verdict"] == "not measurable"


@pytest.mark.parametrize(("change", "reason"), [
    ({"candidate_body": None}, "the candidate ran no equivalence probe"),
    ({"candidate_body": probe_body(top_k=0)}, "returned no log probabilities (K = 0)"),
    ({"candidate_body": probe_body(tokenizer="u" * 64)}, "tokenizers differ"),
    ({"candidate_body": probe_body(probe="q" * 64)}, "answered different probes"),
    ({"candidate": "cd" * 32}, "differ in checkpoint pin"),
    ({"candidate": None}, "not pinned in both arms"),
])
def test_not_measurable_says_why_and_caps_nothing_it_cannot(tmp_path: Path, arms: Arms, change: dict[str, Any],
                                                            reason: str) -> None:
    bodies = {"control_body": probe_body(), "candidate_body": probe_body()}
    bodies.update({k: v for k, v in change.items() if k.endswith("_body")})
    pins = {k: v for k, v in change.items() if not k.endswith("_body")}
    result = compare(tmp_path, arms, bodies["control_body"], bodies["candidate_body"], **pins)
    section = result["equivalence"]
    assert section["verdict"] == "not measurable" and reason in section["reasons"][0]
    assert any("equivalence not measurable" in d for d in result["decision"]["does_not_prove"])


def test_a_changed_sidecar_is_refused(tmp_path: Path, arms: Arms) -> None:
    control, candidate, _ = arms
    attach_probe(control, tmp_path, "control", probe_body())
    attach_probe(candidate, tmp_path, "candidate", probe_body())
    (tmp_path / candidate["equivalence_probe"]["file"]).write_text("{}")
    result = compare_reports(control, candidate, sanitizer=Sanitizer(), folders={"control": tmp_path,
                                                                                   "candidate": tmp_path})
    assert "does not match the SHA-256" in result["equivalence"]["reasons"][0]


def test_thresholds_come_from_the_control_recipe_over_the_anchor() -> None:
    assert Thresholds().min_top1_agreement_pct == 97.67 and Thresholds().max_kl_lower_bound == 0.001355
    mine = Thresholds.from_recipe({"min_top1_agreement_pct": 90})
    assert mine.min_top1_agreement_pct == 90 and mine.max_abs_ln_ppl_ratio == 0.000425
    assert "and the defaults" in mine.source


def test_flip_items_read_gates_tool_cases_and_ladder_smokes() -> None:
    report = {"gates": [
        {"gate": "smoke", "family": "functional", "outcome": "passed", "measurements": {}},
        {"gate": "tools", "family": "functional", "outcome": "failed",
         "measurements": {"items": {"get_weather": True, "set_thermostat": False}}},
        {"gate": "kv_pool", "family": "engine", "outcome": "passed", "measurements": {}},
        {"gate": "quality_tools", "family": "quality", "outcome": "skipped", "measurements": {}}],
        "ladder": [{"target": 1024, "post_probe_smoke_ok": True}]}
    assert flip_items(report) == {"gate:smoke": True, "gate:tools": False, "tools:get_weather": True,
                                  "tools:set_thermostat": False, "ladder:1024": True}


def test_typed_tool_cases_asked_differently_are_left_out_of_the_flips(tmp_path: Path, arms: Arms) -> None:
    """One arm asked its typed tool cases one at a time, the other four at once: their per-case results
    are not paired (a flip could be the batch's), and the section says so; asked the same way they are."""
    control, candidate, _replay = arms
    tools = [next(g for g in report["gates"] if g["gate"] == "tools") for report in (control, candidate)]
    for gate, answers in zip(tools, ({"get_weather": True, "set_alarm": True}, {"get_weather": True,
                                                                                 "set_alarm": False}), strict=True):
        gate["measurements"]["items"] = answers
    tools[1]["measurements"]["in_flight"] = 4
    section = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]
    flips = section["flips"]
    assert not any(key.startswith("tools:") for key in flips["flipped"])
    assert flips["left_out"] == ("the typed tool cases: asked 1 against 4 at once, so a flip could be the batch's, "
                                 "not the change's")
    assert f"the flips leave out {flips['left_out']}" in section["notes"]
    tools[0]["measurements"]["in_flight"] = 4
    same = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]["flips"]
    assert "left_out" not in same and same["items"] == flips["items"] + 2 and "tools:set_alarm" in same["flipped"]


# -- equivalence needs its evidence: every figure measured on enough units -------------------


def _scoring_only(report: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    """The report as an arm that ran only the gates named in ``keep`` (and no ladder)."""
    report["gates"] = [g for g in report["gates"] if g["gate"] in keep]
    report["ladder"] = []
    return report


def test_a_candidate_that_scored_no_item_is_inconclusive_naming_the_flips(tmp_path: Path, arms: Arms) -> None:
    """``--vllmqual-arm-marks candidate=equivalence``: nothing scored in both arms, so flips are not
    measured, and a verdict that needs them cannot be equivalent."""
    _scoring_only(arms[1], ())
    section = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]
    assert section["verdict"] == "inconclusive", section["reasons"]
    assert "flips not measured: 0 items scored in both arms, at least 6 needed" in section["reasons"][0]
    assert "every exact figure within" not in summary_line(section)


def test_one_item_scored_in_both_arms_is_too_few_and_says_how_many_are_needed(tmp_path: Path, arms: Arms) -> None:
    _scoring_only(arms[1], ("smoke",))
    section = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]
    assert section["verdict"] == "inconclusive"
    assert "flips 0 of 1 item scored in both arms" in section["reasons"][0]
    assert "fewer than the 6 needed" in section["reasons"][0]


@pytest.mark.parametrize(("body", "named"), [
    ({"prompts": 4}, "0 of 4 greedy prompts"),
    ({"chunks_per_length": 2}, "on 4 scored chunks"),
])
def test_a_probe_with_too_few_units_is_inconclusive_naming_them(tmp_path: Path, arms: Arms, body: dict[str, int],
                                                                  named: str) -> None:
    section = compare(tmp_path, arms, probe_body(**body), probe_body(**body))["equivalence"]
    assert section["verdict"] == "inconclusive", section["reasons"]
    assert any(named in reason and "fewer than the 8 needed" in reason for reason in section["reasons"])


def test_the_recipe_raises_the_minimum_items(tmp_path: Path, arms: Arms) -> None:
    arms[0]["recipe"]["content"].setdefault("compare", {})["equivalence"] = {"min_shared_items": 10}
    section = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]
    assert section["verdict"] == "inconclusive"
    assert "flips 0 of 7 items scored in both arms" in section["reasons"][0]
    assert "fewer than the 10 needed" in section["reasons"][0]


def test_counted_figures_have_exact_binomial_intervals(tmp_path: Path, arms: Arms) -> None:
    """0 of 8 greedy prompts diverged hard: within the zero threshold, its exact 95% upper bound
    (Clopper-Pearson, 36.9%) printed beside it; 1 of 8 is beyond zero."""
    section = compare(tmp_path, arms, probe_body(), probe_body())["equivalence"]
    assert section["verdict"] == "equivalent", section["reasons"]
    hard = figure(section, "hard_divergence")
    assert (hard["status"], hard["low"], hard.get("units"), hard.get("events")) == ("within", 0.0, 8, 0)
    assert hard["high"] == pytest.approx(36.94, abs=0.01)
    flips = figure(section, "flips")
    assert (flips["status"], flips.get("units"), flips.get("events")) == ("within", 7, 0)
    assert flips["high"] == pytest.approx(100 * (1 - 0.025 ** (1 / 7)), abs=0.01)
    assert any("hard-divergence rate 0 of 8 greedy prompts" in r and "36.9" in r for r in section["reasons"])
    one = compare(tmp_path, arms, probe_body(), probe_body(hard_greedy=True))["equivalence"]
    hard = figure(one, "hard_divergence")
    assert one["verdict"] == "not equivalent" and hard["status"] == "beyond" and hard["events"] == 1
    assert (hard["low"], hard["high"]) == (pytest.approx(0.316, abs=0.01), pytest.approx(52.65, abs=0.01))


def _section(items: dict[str, bool], candidate_items: dict[str, bool], flips_pct: float) -> str:
    """The verdict of two arms with the same probe answers that scored these items."""
    def report(scored: dict[str, bool]) -> dict[str, Any]:
        gates = [{"gate": name, "family": "quality", "outcome": "passed" if ok else "failed", "measurements": {}}
                 for name, ok in scored.items()]
        return {"gates": gates, "recipe": {"content": {"compare": {"equivalence": {"max_flips_pct": flips_pct}}}}}
    body = {**probe_body(), "arm": {"checkpoint_pin": {"kind": "content digest", "value": "ab" * 32}}}
    section = equivalence_section(report(items), report(candidate_items), None, {"control": body, "candidate": body})
    return str(section["verdict"])


def test_property_scored_items_that_agree_never_take_equivalence_away_and_a_flip_may() -> None:
    """Seeded random cases: the arms score items one by one in both arms, from none. An item answered alike
    (a figure measured within) never turns ``equivalent`` into ``inconclusive``; once enough have
    agreed the A/A is equivalent; an item that flipped beyond a zero threshold makes it ``not
    equivalent``."""
    rng = random.Random(20261205)
    for _ in range(40):
        control: dict[str, bool] = {}
        before = _section(control, dict(control), 0.0)  # no item scored in both arms: flips not measured
        for number in range(rng.randint(7, 10)):
            control[f"item{number}"] = rng.random() < 0.7
            after = _section(control, dict(control), 0.0)
            assert not (before == "equivalent" and after != "equivalent"), (before, after, control)
            before = after
        assert before == "equivalent", control
        flipped = dict(control)
        name = rng.choice(sorted(flipped))
        flipped[name] = not flipped[name]
        assert _section(control, flipped, 0.0) == "not equivalent"
        assert _section(control, flipped, 100.0) in ("equivalent", "inconclusive")


def test_sidecar_arm_reads_the_pin_caching_and_logprobs_mode_from_the_report() -> None:
    report = {"identity": {"model_files": {"content": "sha256:" + "c" * 64}, "observed": {"runtime_version": "0.32.0"}},
              "engine": {"cache_config": {"enable_prefix_caching": "False"},
                         "non_default_args": {"logprobs_mode": "processed_logprobs"}}}
    assert sidecar_arm(report) == {"checkpoint_pin": {"kind": "content digest", "value": "sha256:" + "c" * 64},
                                   "prefix_caching": False, "logprobs_mode": "processed_logprobs",
                                   "runtime_version": "0.32.0"}
    assert sidecar_arm({}) == {"checkpoint_pin": None, "prefix_caching": None, "logprobs_mode": "raw_logprobs",
                               "runtime_version": None}


def _needles(found: dict[str, bool]) -> dict[str, Any]:
    """An arm's sidecar with needle answers: item id → found, at the length its grade names."""
    return {"items": {"outcomes": [{"item_id": k, "family": "needle", "correct": v} for k, v in found.items()],
                      "answers": [{"item_id": k, "family": "needle", "grade": f"tokens-{k.split('/')[0]}-depth-50"}
                                  for k in found]}}


def test_needle_accuracy_by_depth_has_each_arm_s_exact_interval() -> None:
    control = _needles({"1024/a": True, "1024/b": True, "1024/c": False, "256/a": True})
    candidate = _needles({"1024/a": True, "1024/b": False, "1024/c": False, "256/a": True})
    rows = needle_by_depth(control, candidate)
    assert [(r["tokens"], r["items"]) for r in rows] == [(256, 1), (1024, 3)]
    # 2 of 3: Clopper-Pearson 95% is [9.43%, 99.16%] (hand-computed from the beta quantiles).
    two_of_three = rows[1]["accuracy_pct"]["control"]
    assert (two_of_three["point"], round(two_of_three["low"], 2), round(two_of_three["high"], 2)) == \
        (66.667, 9.43, 99.16)
    assert rows[1]["accuracy_pct"]["candidate"]["correct"] == 1
    assert needle_by_depth("no sidecar", None) == []
