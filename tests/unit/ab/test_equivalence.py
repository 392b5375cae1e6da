"""The comparison's equivalence section on synthetic probe answers: the verdict words, the A/A
floor, not measurable (no probe, K = 0, another tokenizer or checkpoint), the decision's cap,
the terminal line and the junit file."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support import UNIT_DATA
from support.equivalence_samples import attach_probe, probe_body

from pytest_vllmqual.ab.compare import compare_reports, render_markdown
from pytest_vllmqual.ab.equivalence import flip_items, render_junit, summary_line
from pytest_vllmqual.equivalence.verdict import Thresholds
from pytest_vllmqual.privacy.sanitize import Sanitizer

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
    for key in ("top1_agreement", "ln_ppl_ratio", "rms_delta_p", "hard_divergence"):
        checked = figure(section, key)
        assert checked["status"] == "within" and checked["within_floor"] is True
        assert checked["low"] == checked["high"] == checked["point"]
    assert figure(section, "kl_lower_bound")["status"] == "not shown"  # a lower bound never shows equivalence
    assert section["greedy"]["identical"] == 4
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
    line = summary_line(section)
    assert line.startswith("equivalence: not equivalent: top-1 agreement 75.0% [") and "below 97.7%" in line
    assert "A/A floor not measured" in line
    assert "### Output equivalence" in render_markdown(result)
    suite = ET.fromstring(render_junit(section)).find("testsuite")
    assert suite is not None and int(suite.get("failures") or 0) >= 3


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
